"""``tierscope import prometheus``: ``query_range`` results as Prometheus's HTTP API returns them
(``{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {labels},
"values": [[time, "value"], ...]}, ...]}}``), one file per query.

Each series becomes a column ``<component>.<metric>`` of one table on the union of the series'
times, read as :mod:`.metrics` reads wide tables (units detected and said). The component is the
first of the labels ``--component-label`` names (default ``job``, ``container``, ``pod``,
``service``); the metric is ``--metric``, else the file's name (``cpu.json`` → ``cpu``), else the
series' ``__name__`` where tierscope knows it (:data:`PROM_NAMES`). Counters (names ending in
``_total``) become rates per second; a reset (a counter going down) leaves a gap. Prometheus's
``NaN`` is no value.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from tierscope.errors import InputError, clip
from tierscope.ingest._files import Read
from tierscope.ingest.metrics import wide_frame
from tierscope.spec.imports import METRIC_SUFFIXES

#: Labels that name the component, first found first.
COMPONENT_LABELS = ("job", "container", "pod", "service")
#: Prometheus metric names tierscope knows: name -> metric suffix (counters become rates).
PROM_NAMES = {
    "container_cpu_usage_seconds_total": "cpu_cores",
    "process_cpu_seconds_total": "cpu_cores",
    "container_memory_usage_bytes": "mem",
    "container_memory_working_set_bytes": "mem",
    "process_resident_memory_bytes": "mem",
}


def read_prometheus(
    path: Path, *, component_labels: tuple[str, ...] = COMPONENT_LABELS,
    metric: str | None = None, cpu_unit: str | None = None,
) -> Read:  # fmt: skip
    """One ``query_range`` result file as long samples (see the module's docstring)."""
    src = str(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError("file", src, f"a readable file ({exc.strerror})", source=src) from None
    except (ValueError, RecursionError) as exc:
        raise InputError("file", src, f"JSON ({clip(str(exc), 120)})", source=src) from None
    known = path.stem if path.stem.lower() in METRIC_SUFFIXES else None
    return answer_frame(doc, src, path.name, metric or known, component_labels, cpu_unit)


def answer_frame(
    doc: object, src: str, label: str, metric: str | None,
    component_labels: tuple[str, ...] = COMPONENT_LABELS, cpu_unit: str | None = None,
) -> Read:  # fmt: skip
    """A ``query_range`` answer (decoded JSON) as long samples; ``metric``: the metric of every
    series (else each series' known ``__name__``). A raw counter (``__name__`` ending in
    ``_total``) becomes a rate."""
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise InputError(
            "data.resultType",
            data.get("resultType") if isinstance(data, dict) else None,
            "matrix (the answer of /api/v1/query_range)",
            source=src,
        )
    results = data.get("result")
    if not isinstance(results, list) or not results:
        raise InputError("data.result", None, "at least one series", source=src)
    columns: dict[str, dict[float, str]] = {}
    counters = []
    for i, series in enumerate(results):
        where = f"data.result[{i}]"
        labels = series.get("metric") if isinstance(series, dict) else None
        values = series.get("values") if isinstance(series, dict) else None
        if not isinstance(labels, dict) or not isinstance(values, list):
            raise InputError(where, None, "a series with metric labels and values", source=src)
        component = next((str(labels[k]) for k in component_labels if labels.get(k)), None)
        if component is None:
            raise InputError(
                f"{where}.metric", clip(json.dumps(labels), 120),
                "a label naming the component: " + ", ".join(component_labels)
                + " (--component-label)", source=src,
            )  # fmt: skip
        name = str(labels.get("__name__", ""))
        suffix = metric or PROM_NAMES.get(name)
        if suffix is None or suffix not in METRIC_SUFFIXES:
            raise InputError(
                "--metric", suffix or name or label,
                "a known metric (" + ", ".join(sorted(METRIC_SUFFIXES)[:8]) + ", ...): name the "
                "file after it or give --metric", source=src,
            )  # fmt: skip
        column = f"{component}.{suffix}"
        if column in columns:
            raise InputError(
                f"{where}.metric", clip(json.dumps(labels), 120),
                f"one series per component ({component} has two: aggregate them in the query "
                f"or choose another --component-label)", source=src,
            )  # fmt: skip
        points: dict[float, str] = {}
        for j, pair in enumerate(values):
            if not (isinstance(pair, list) and len(pair) == 2):
                raise InputError(f"{where}.values[{j}]", pair, '[time, "value"]', source=src)
            try:
                t = float(pair[0])
            except (TypeError, ValueError):
                raise InputError(f"{where}.values[{j}]", pair[0], "a time (epoch seconds)",
                                 source=src) from None  # fmt: skip
            v = str(pair[1])
            points[t] = "" if v.lower() in ("nan", "+inf", "-inf", "inf") else v
        columns[column] = points
        if name.endswith("_total"):
            counters.append(column)
    times = sorted({t for pts in columns.values() for t in pts})
    table = pl.DataFrame(
        {"_t": times, **{c: [pts.get(t) for t in times] for c, pts in columns.items()}},
        schema={"_t": pl.Float64, **dict.fromkeys(columns, pl.String)},
    ).with_row_index("_line", offset=1)
    notes = [f"{label}: {len(columns)} series, {len(times)} times (epoch seconds)"]
    if counters:
        rate = {c: pl.col(c).cast(pl.Float64, strict=False).diff() / pl.col("_t").diff()
                for c in counters}  # fmt: skip
        table = table.with_columns(
            pl.when(r >= 0).then(r.cast(pl.String)).otherwise(None).alias(c)
            for c, r in rate.items()
        )
        notes.append(f"counters as rates per second: {', '.join(counters[:3])}"
                     + (" ..." if len(counters) > 3 else ""))  # fmt: skip
    frame, said = wide_frame(table, f"{src} (aligned series; line = time index)", None, cpu_unit)
    return Read(frame, True, notes + said)


def query_range(
    url: str, queries: dict[str, str], *, start: float, end: float, step: float,
    component_labels: tuple[str, ...] = COMPONENT_LABELS, cpu_unit: str | None = None,
    timeout_s: float = 30.0,
) -> list[Read]:  # fmt: skip
    """Ask the Prometheus server at ``url`` each query (metric -> PromQL) over [start, end]
    every ``step`` seconds (``/api/v1/query_range``): one :class:`Read` per query."""
    import urllib.error
    import urllib.parse
    import urllib.request

    if not end > start or not step > 0:
        raise InputError("--start/--end/--step", f"{start}/{end}/{step}",
                         "start before end and a step > 0 (seconds)")  # fmt: skip
    base = url.rstrip("/") + "/api/v1/query_range?"
    out = []
    for metric, expr in queries.items():
        if metric not in METRIC_SUFFIXES:
            raise InputError(f"--query-file {metric}", metric, "a known metric name as the key ("
                             + ", ".join(sorted(METRIC_SUFFIXES)[:8]) + ", ...)")  # fmt: skip
        query = urllib.parse.urlencode(
            {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        )
        try:
            with urllib.request.urlopen(base + query, timeout=timeout_s) as answer:
                doc = json.loads(answer.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            why = exc.read().decode("utf-8", "replace")
            raise InputError(
                f"--query-file {metric}",
                expr,
                f"a query the server takes ({exc.code}: {clip(why, 200)})",
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise InputError("--url", url, f"a Prometheus server that answers ({reason})") from None
        except ValueError as exc:
            raise InputError("--url", url, f"JSON answers ({clip(str(exc), 120)})") from None
        out.append(answer_frame(doc, f"{url} ({metric})", metric, metric, component_labels,
                                cpu_unit))  # fmt: skip
    return out


__all__ = ["COMPONENT_LABELS", "PROM_NAMES", "answer_frame", "query_range", "read_prometheus"]
