"""``tierscope import metrics``: metric tables as monitoring tools export them, long or wide.

A long table has a row per sample (``time``/``ts``, ``tier`` or ``component``, ``metric``,
``value``, optional ``node``). A wide table (what every Prometheus, Grafana or cAdvisor export
looks like) has a time column and one column per component and metric, named
``<component>_<metric>`` or ``<component>.<metric>``; the component may itself contain ``-``,
``_`` and ``.``: the name is split at the longest known metric suffix
(:data:`tierscope.spec.imports.METRIC_SUFFIXES`), or as ``--map`` says.

Units are read, not assumed, and said in the import's notes: CPU columns are percent of one
core when any passes 1.5 (``rate(container_cpu_usage_seconds_total) * 100``), else cores
(``--cpu-unit`` decides when the data cannot); fractions given in percent are divided by 100;
with ``--cpu-limit component=cores`` a component's CPU also becomes ``cpu_util`` of its limit,
and a component whose CPU flattens at a ceiling is pointed out (its limit, probably). Bad values
(not a number, NaN, negative where a quantity cannot be, a utilisation past 1.5 after units)
and times that repeat or go back are :class:`InputError` naming the file, the line and the
column; empty cells are no measurement and are counted in the notes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tierscope.errors import InputError, clip
from tierscope.ingest._files import Read, line_of, numbers, read_table
from tierscope.ingest._time import parse_times
from tierscope.spec.imports import CPU_UNITS, METRIC_SUFFIXES, TIME_NAMES

#: A CPU column whose values pass this is in percent of one core.
PERCENT_ABOVE = 1.5
#: A utilisation (a fraction of a limit) past this, after units, is not one.
UTIL_MAX = 1.5
#: A series that spends this share of its samples within CEILING_BAND of its maximum flattens
#: at a ceiling (its limit, probably).
CEILING_SHARE, CEILING_BAND = 0.2, 0.03
_NON_NEGATIVE = ("bytes", "rate", "seconds", "count", "cpu", "percent", "fraction", "per_row")
_LONG = {"tier", "metric", "value"}


@dataclass(frozen=True)
class Column:
    """What one column of a wide table holds."""

    name: str
    component: str
    suffix: str  # the metric part as written

    @property
    def metric(self) -> str:
        return METRIC_SUFFIXES[self.suffix][0]

    @property
    def unit(self) -> str:
        return METRIC_SUFFIXES[self.suffix][1]


def split_column(name: str, mapping: Mapping[str, str] | None = None) -> Column | None:
    """``<component>_<metric>`` or ``<component>.<metric>`` split at the longest known metric
    suffix; ``mapping`` (``--map``) gives a column's ``component.metric`` outright."""
    if mapping and name in mapping:
        component, _, suffix = mapping[name].rpartition(".")
        if not component or suffix not in METRIC_SUFFIXES:
            raise InputError(
                f"--map {name}",
                mapping[name],
                "component.metric with a known metric (" + ", ".join(sorted(METRIC_SUFFIXES)) + ")",
            )
        return Column(name, component, suffix)
    best: Column | None = None
    lowered = name.lower()
    for suffix in METRIC_SUFFIXES:
        for sep in ("_", "."):
            end = sep + suffix
            longer = best is None or len(suffix) > len(best.suffix)
            if longer and lowered.endswith(end) and len(name) > len(end):
                best = Column(name, name[: -len(end)], suffix)
    return best


def read_metrics(
    path: Path,
    *,
    mapping: Mapping[str, str] | None = None,
    time_column: str | None = None,
    time_unit: str | None = None,
    tz: str | None = None,
    cpu_unit: str | None = None,
) -> Read:
    """Read one metrics file, long or wide (see the module's docstring)."""
    src = str(path)
    if cpu_unit is not None and cpu_unit not in CPU_UNITS:
        raise InputError("--cpu-unit", cpu_unit, "one of " + ", ".join(CPU_UNITS))
    table = read_table(path)
    names = {c.lower(): c for c in table.columns}
    when = time_column or next((names[n] for n in TIME_NAMES if n in names), None)
    if when is None or when not in table.columns:
        raise InputError(
            "--time-column" if time_column else "header",
            time_column or ", ".join(clip(c, 40) for c in table.columns[:6]),
            "a time column (" + ", ".join(TIME_NAMES) + ", or --time-column NAME)",
            source=src,
        )
    times = parse_times(table[when], source=src, column=when, unit=time_unit, tz=tz)
    table = table.with_columns(times.seconds.alias("_t")).drop(when)
    if "component" in table.columns and "tier" not in table.columns:
        table = table.rename({"component": "tier"})
    if set(table.columns) >= _LONG:
        frame, notes = _long(table, src)
    else:
        frame, notes = wide_frame(table, src, mapping, cpu_unit)
    return Read(frame, times.absolute, [f"{path.name}: times are {times.said}", *notes])


def _in_percent(v: pl.Series) -> bool:
    """A fraction column written in percent: most values past 1.5, or some past 10 (a
    utilisation a little over 1 is a fraction out of range, not a percentage)."""
    return float(v.median() or 0.0) > PERCENT_ABOVE or float(v.max() or 0.0) > 10


def _check_times(table: pl.DataFrame, src: str, keys: list[str]) -> None:
    step = table.select(pl.col("_t").diff().over(keys) if keys else pl.col("_t").diff())
    mask = (step.to_series() <= 0).fill_null(False)
    line = line_of(table, mask)
    if line is not None:
        raise InputError(
            "time",
            None,
            "times increasing from row to row (this one repeats or goes back)"
            + (f" within each {', '.join(keys)}" if keys else ""),
            source=f"{src}, line {line}",
        )


def wide_frame(
    table: pl.DataFrame, src: str, mapping: Mapping[str, str] | None, cpu_unit: str | None
) -> tuple[pl.DataFrame, list[str]]:
    _check_times(table, src, [])
    columns = []
    for name in table.columns:
        if name in ("_t", "_line"):
            continue
        col = split_column(name, mapping)
        if col is None:
            raise InputError(
                name,
                None,
                "a column named <component>_<metric> or <component>.<metric> with a known "
                "metric (cpu, mem, lat_99, lod, ...), or one --map FILE names",
                source=src,
            )
        columns.append(col)
    values = {
        c.name: numbers(table, c.name, src, non_negative=c.unit in _NON_NEGATIVE) for c in columns
    }
    cpu = [c for c in columns if c.unit == "cpu"]
    unit = cpu_unit
    notes = []
    if cpu and unit is None:
        top = max((float(values[c.name].max() or 0.0) for c in cpu), default=0.0)
        unit = "percent" if top > PERCENT_ABOVE else "cores"
        notes.append(
            f"CPU columns read as {'percent of one core' if unit == 'percent' else 'cores'} "
            f"(largest value {top:g}" + ("; --cpu-unit says otherwise)" if unit == "cores" else ")")
        )
    frames, empty, percent = [], 0, []
    for col in columns:
        v = values[col.name]
        metric, how = col.metric, col.unit
        if how == "cpu":
            metric, how = ("cpu_util", "fraction") if unit == "fraction" else ("cpu_cores", unit)
        if how == "per_row":
            step = float(table["_t"].diff().median() or 0.0)
            if not step > 0:
                raise InputError(col.name, None, "rows at least two distinct times apart (a "
                                 "count per row becomes a rate)", source=src)  # fmt: skip
            v = v / step
            said_rows = f"counts per row divided by the rows' step ({step:g} s) into rates"
            if said_rows not in notes:
                notes.append(said_rows)
        if how == "percent":
            v, metric = v / 100.0, ("cpu_cores" if metric == "cpu" else metric)
        elif how == "fraction" and _in_percent(v):
            v = v / 100.0
            percent.append(col.name)
        if how == "fraction":
            mask = (v > UTIL_MAX).fill_null(False)
            line = line_of(table, mask)
            if line is not None:
                raise InputError(
                    col.name,
                    float(v[int(mask.arg_true()[0])]),
                    f"a utilisation up to {UTIL_MAX:g} (a fraction of the limit)",
                    source=f"{src}, line {line}",
                )
        empty += int(v.is_null().sum())
        frames.append(
            pl.DataFrame(
                {"t": table["_t"], "tier": col.component, "metric": metric, "value": v}
            ).filter(pl.col("value").is_not_null())
        )
    if percent:
        shown = ", ".join(percent[:3]) + (
            f" and {len(percent) - 3} more" if len(percent) > 3 else ""
        )
        notes.append(f"in percent, divided by 100: {shown}")
    frame = pl.concat(frames).with_columns(pl.col("tier").alias("node"))
    components = sorted(set(frame["tier"]))
    notes.append(f"{len(columns)} columns: {len(components)} components ({', '.join(components)})")
    if empty:
        notes.append(f"{empty} empty cells: no measurement")
    return frame.select("t", "tier", "node", "metric", "value"), notes


def _long(table: pl.DataFrame, src: str) -> tuple[pl.DataFrame, list[str]]:
    for name in ("tier", "metric"):
        mask = (table[name].is_null() | (table[name].str.strip_chars() == "")).fill_null(True)
        line = line_of(table, mask)
        if line is not None:
            raise InputError(name, None, "a non-empty name", source=f"{src}, line {line}")
    unknown = set(table.columns) - {"_t", "_line", "tier", "metric", "value", "node"}
    if unknown:
        raise InputError(
            sorted(unknown)[0], None, "a column of a long table (time, tier, metric, value, "
            "node)", source=src,
        )  # fmt: skip
    if "node" not in table.columns:
        table = table.with_columns(pl.col("tier").alias("node"))
    table = table.with_columns(pl.col("node").fill_null(pl.col("tier")))
    _check_times(table, src, ["tier", "node", "metric"])
    value = numbers(table, "value", src)
    frame = table.with_columns(value.alias("value")).rename({"_t": "t"})
    empty = int(frame["value"].is_null().sum())
    frame = frame.filter(pl.col("value").is_not_null())
    notes = [f"{empty} empty values: no measurement"] if empty else []
    return frame.select("t", "tier", "node", "metric", "value"), notes


def cpu_limits(
    frame: pl.DataFrame, limits: Mapping[str, float], source: str
) -> tuple[pl.DataFrame, list[str]]:
    """``cpu_util`` of each component given a limit (cores), from its ``cpu_cores``; notes on
    components without one whose CPU flattens at a ceiling."""
    cores = frame.filter(pl.col("metric") == "cpu_cores")
    components = set(frame["tier"])
    for name, limit in limits.items():
        if name not in components:
            raise InputError(
                "--cpu-limit", name, "a component of the data: " + ", ".join(sorted(components)),
                source=source,
            )  # fmt: skip
        if not limit > 0:
            raise InputError(f"--cpu-limit {name}", limit, "cores > 0", source=source)
    util = cores.filter(pl.col("tier").is_in(list(limits))).with_columns(
        (pl.col("value") / pl.col("tier").replace_strict(dict(limits))).alias("value"),
        pl.lit("cpu_util").alias("metric"),
    )
    notes = [f"cpu_util of {', '.join(sorted(limits))} from --cpu-limit"] if limits else []
    for (tier,), series in cores.group_by("tier"):
        if tier in limits or series.height < 10:
            continue
        top = float(series["value"].max() or 0.0)
        near = float((series["value"] >= (1 - CEILING_BAND) * top).mean() or 0.0)
        if top >= 0.05 and near >= CEILING_SHARE:
            notes.append(
                f"{tier}'s CPU flattens at {top:.2f} cores in {near:.0%} of its samples: its "
                f"limit? (--cpu-limit {tier}={top:.2f})"
            )
    without = sorted(set(cores["tier"]) - set(limits))
    if without:
        notes.append(
            f"no CPU limit for {', '.join(without)}: their CPU is in cores, not a fraction of a "
            "limit (--cpu-limit COMPONENT=CORES)"
        )
    return pl.concat([frame, util.select(frame.columns)]), notes


def parse_limits(pairs: list[str] | None, flag: str = "--cpu-limit") -> dict[str, float]:
    """``component=amount`` pairs: cores (``--cpu-limit``), or bytes with an optional unit
    (``--mem-limit``: ``512Mi``, ``2G``, ``1073741824``)."""
    out: dict[str, float] = {}
    memory = flag == "--mem-limit"
    for text in pairs or []:
        name, sep, value = text.partition("=")
        amount = _bytes(value) if memory else _number(value)
        if not sep or not name.strip() or not amount > 0:
            expected = "COMPONENT=BYTES (512Mi, 2G, ...)" if memory else "COMPONENT=CORES"
            raise InputError(flag, text, f"{expected} above 0")
        out[name.strip()] = amount
    return out


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


#: Byte units of ``--mem-limit``.
_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2**10, "mi": 2**20, "gi": 2**30,
          "ti": 2**40}  # fmt: skip


def _bytes(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9.]+(?:[eE][0-9]+)?)\s*([kmgtKMGT]i?)?[bB]?\s*", text)
    if m is None:
        return float("nan")
    return _number(m.group(1)) * _UNITS[(m.group(2) or "").lower()]


def mem_limits(
    frame: pl.DataFrame, limits: Mapping[str, float], source: str
) -> tuple[pl.DataFrame, list[str]]:
    """``mem_util`` of each component given a memory limit (bytes), from its ``mem_bytes``
    (its nodes' summed per sample)."""
    if not limits:
        return frame, []
    components = set(frame["tier"])
    for name in limits:
        if name not in components:
            raise InputError("--mem-limit", name,
                             "a component of the data: " + ", ".join(sorted(components)),
                             source=source)  # fmt: skip
    used = (
        frame.filter((pl.col("metric") == "mem_bytes") & pl.col("tier").is_in(list(limits)))
        .group_by("setup", "tier", "t")
        .agg(pl.col("value").sum())
        .with_columns(
            (pl.col("value") / pl.col("tier").replace_strict(dict(limits))).alias("value"),
            pl.lit("mem_util").alias("metric"),
            pl.col("tier").alias("node"),
        )
    )
    note = f"mem_util of {', '.join(sorted(limits))} from --mem-limit"
    return pl.concat([frame, used.select(frame.columns)]), [note]


def read_map(path: str | os.PathLike[str] | None) -> dict[str, str] | None:
    """``--map FILE``: YAML ``column: component.metric``."""
    if path is None:
        return None
    from tierscope.spec._load import load_yaml

    doc = load_yaml(path)
    if not isinstance(doc, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in doc.items()
    ):
        raise InputError("--map", str(path), "a YAML mapping of column: component.metric")
    return dict(doc)


__all__ = [
    "Column",
    "Read",
    "cpu_limits",
    "parse_limits",
    "read_map",
    "read_metrics",
    "split_column",
]
