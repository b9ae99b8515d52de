"""Observations for learning: one row per observation window, its features and its labels.

A run's steady phases are cut into windows of ``window_s`` seconds (window ``k`` of a phase is
[t_start + k w, t_start + (k+1) w); a last, partial window is dropped). For every ``tier.metric``
the window gives four features, each computable online from the last ``window_s`` seconds of
50 ms samples: ``:mean``, ``:std`` (short-window variability), ``:max`` and ``:slope`` (least-
squares trend, units per second). The request records add ``<tier>.rt:mean``, ``:p95`` and
``:max`` (response times of the requests that ended in the window). The replicas of a tier are
averaged per sample first. ``anytier.<metric>:<stat>`` is the largest value of a metric over the
server tiers: a tier-agnostic feature ("some tier is at its quota") that carries over between
setups limited by different tiers.

Labels: ``saturation`` (client / gray / server) is the label of the observation's (setup, level)
in the saturation analysis (seed 000 §2.4); ``tier`` is the setup's limiting tier, the most
frequent primary bottleneck tier of its gray and server levels in the bottleneck analysis (the
tier that limits, or will limit, this system: a property of the setup, learnable at any load
because a tier's utilisation relative to its capacity tells it early).

A table (Parquet or CSV) holds observations directly: ``setup, level[, rep, window], throughput,
<tier.metric…>`` and optionally ``label`` (or ``saturation``) and ``tier`` as injected ground
truth; without ``label`` the labels come from the per-level mean throughput by the rule of the
saturation analysis.

Design decisions: the indicator category of every metric in every setup is kept beside the
data, so the "recommended" feature set of a cross-validation fold is chosen from its *training*
setups only; choosing it on all setups would leak the held-out setups into the model. The
categories come from the run's saved analysis when it used the same significance (the
permutation tests behind them are most of the cost of reading a run), else are computed anew;
runs are read in parallel worker processes.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from joblib import Parallel, delayed

from tierscope.analysis import indicators as indicator_analysis
from tierscope.analysis import saturation as saturation_analysis
from tierscope.analysis._windows import in_steady_windows
from tierscope.errors import InputError
from tierscope.progress import step
from tierscope.spec.analysis import AnalysisOptions

ID_COLUMNS = ("setup", "level", "rep", "window")
LABEL_COLUMNS = ("label", "saturation", "tier")
STATS = ("mean", "std", "max", "slope")
CLIENT, HOST = "client", "host"
#: Pseudo-tier of the features that take the largest value over the server tiers.
ANY_TIER = "anytier"
SATURATION_CLASSES = ("client", "gray", "server")
#: The progress stage of :func:`load_dataset`.
READING = "reading runs"
#: Significance of a trend change when the categories behind "recommended" are computed: a
#: corpus sweep has few levels (6 here), where 0.01 finds almost no reliable metric at all.
INDICATOR_P = 0.05

#: Resource consumption metrics (seed 000's RC type).
RESOURCE_METRICS = frozenset(
    {
        "cpu_util", "cpu_cores", "cpu_throttled_ratio", "cpu_throttled_s", "ctx_switches_s",
        "mem_bytes", "disk_read_bytes_s", "disk_write_bytes_s", "disk_util", "utilization",
        "psi_cpu_some", "psi_io_some", "psi_memory_some", "machine_cpu_busy",
    }
)  # fmt: skip
#: Waiting metrics: queue sizes, waiting times and busy/idle threads (seed 000's QS, QWT, ITD).
WAITING_METRICS = frozenset(
    {
        "queue_length", "queue_length_max", "cpu_wait", "active_workers", "worker_util",
        "pool_util", "outstanding",
    }
)  # fmt: skip


def metric_of(feature: str) -> str:
    """``app.cpu_util:slope`` -> ``app.cpu_util``."""
    return feature.split(":", 1)[0]


def _tier_metric(feature: str) -> tuple[str, str]:
    tier, _, metric = metric_of(feature).partition(".")
    return tier, metric


def in_set(feature: str, name: str) -> bool:
    """Whether a feature belongs to one of the fixed feature sets (not ``recommended``)."""
    tier, metric = _tier_metric(feature)
    if name == "all":
        return True
    if name == "resource":
        return metric in RESOURCE_METRICS
    if name == "server":
        return tier not in (CLIENT, HOST, "") and metric not in RESOURCE_METRICS
    if name == "latency":
        return metric.startswith("rt") or "latency" in metric or "response_time" in metric
    if name == "waiting":
        return metric in WAITING_METRICS or "wait" in metric or metric.startswith("queue")
    raise InputError("--features", name, "a fixed feature set")


@dataclass
class Dataset:
    """Observations (rows) x features, with their ids and labels."""

    features: pl.DataFrame
    ids: pl.DataFrame  # setup (str), level (f64), rep (i64), window (i64)
    labels: dict[str, list[str | None]]  # "saturation" / "tier" -> one label per row
    categories: dict[str, dict[str, str]] = field(default_factory=dict)  # setup -> metric -> cat
    window_s: float = 1.0
    sources: list[str] = field(default_factory=list)

    @property
    def feature_names(self) -> list[str]:
        return list(self.features.columns)

    @property
    def setups(self) -> np.ndarray:
        return self.ids["setup"].to_numpy()

    @property
    def levels(self) -> np.ndarray:
        return self.ids["level"].to_numpy()

    def recommended(self, setups: Sequence[str] | None = None) -> list[str]:
        """Features of metrics that are reliable or partially reliable indicators across
        ``setups`` (default: all), by the aggregation rule of the indicator analysis."""
        chosen = set(setups) if setups is not None else set(self.categories)
        per_metric: dict[str, dict[str, str]] = {}
        for setup, cats in self.categories.items():
            if setup in chosen:
                for metric, cat in cats.items():
                    per_metric.setdefault(metric, {})[setup] = cat
        good = {
            m
            for m, per in per_metric.items()
            if indicator_analysis.aggregate(per) in (indicator_analysis.R, indicator_analysis.PR)
        }
        return [f for f in self.feature_names if metric_of(f) in good]

    def feature_set(self, name: str, setups: Sequence[str] | None = None) -> list[str]:
        if name == "recommended":
            return self.recommended(setups)
        return [f for f in self.feature_names if in_set(f, name)]

    def labelled(self, target: str) -> Dataset:
        """The rows that have a ``target`` label; InputError when none has."""
        labels = self.labels.get(target)
        have = [v is not None for v in labels] if labels is not None else []
        if not any(have):
            raise InputError(
                "labels",
                target,
                f"'{target}' labels for some observations "
                + (
                    "(a table needs a 'tier' column)"
                    if target == "tier"
                    else "(runs with a saturation analysis, or a 'label'/'throughput' column)"
                ),
                source=", ".join(self.sources) or None,
            )
        mask = pl.Series(have)
        return Dataset(
            features=self.features.filter(mask),
            ids=self.ids.filter(mask),
            labels={
                k: [x for x, h in zip(v, have, strict=True) if h] for k, v in self.labels.items()
            },
            categories=self.categories,
            window_s=self.window_s,
            sources=self.sources,
        )


# ---- window features ---------------------------------------------------------------------------
def window_features(
    metrics: pl.DataFrame | pl.LazyFrame | None,
    windows: pl.DataFrame,
    window_s: float,
    requests: pl.DataFrame | pl.LazyFrame | None = None,
) -> pl.DataFrame:
    """One row per observation window of ``windows`` (setup, level, rep, t_start, t_end):
    ``setup, level, rep, window`` and the features (module docstring)."""
    keys = ["_setup", "_level", "_rep", "window"]
    parts: list[pl.DataFrame] = []
    if metrics is not None:
        samples = (
            metrics.lazy()
            .filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan())
            .group_by("t", "tier", "metric")
            .agg(pl.col("value").mean())  # replicas of a tier: one value per sample time
        )
        placed = _windowed(in_steady_windows(samples, windows), "t", window_s)
        dt = pl.col("t") - pl.col("t").mean()
        slope = (dt * (pl.col("value") - pl.col("value").mean())).sum() / (dt * dt).sum()
        stats = (
            placed.group_by(*keys, "tier", "metric")
            .agg(
                pl.col("value").mean().alias("mean"),
                pl.col("value").std(ddof=0).alias("std"),
                pl.col("value").max().alias("max"),
                pl.when(pl.len() >= 3).then(slope).otherwise(0.0).alias("slope"),
            )
            .collect()
        )
        if stats.height:
            long = stats.unpivot(
                index=[*keys, "tier", "metric"], on=list(STATS), variable_name="stat"
            ).with_columns(
                pl.concat_str("tier", pl.lit("."), "metric", pl.lit(":"), "stat").alias("name")
            )
            parts.append(long.pivot(on="name", index=keys, values="value"))
            parts.append(_across_tiers(long, keys))
    if requests is not None:
        rq = requests.lazy().filter(pl.col("end").is_not_null())
        placed = _windowed(in_steady_windows(rq, windows, time="end"), "end", window_s)
        rt = pl.col("end") - pl.col("start")
        stats = (
            placed.group_by(*keys, "tier")
            .agg(
                rt.mean().alias("rt:mean"),
                rt.quantile(0.95, "linear").alias("rt:p95"),
                rt.max().alias("rt:max"),
            )
            .collect()
        )
        if stats.height:
            long = stats.unpivot(
                index=[*keys, "tier"], on=["rt:mean", "rt:p95", "rt:max"], variable_name="stat"
            ).with_columns(pl.concat_str("tier", pl.lit("."), "stat").alias("name"))
            parts.append(long.pivot(on="name", index=keys, values="value"))
    if not parts:
        return pl.DataFrame(
            schema={"setup": pl.String, "level": pl.Float64, "rep": pl.Int64, "window": pl.Int64}
        )
    out = parts[0]
    for p in parts[1:]:
        out = out.join(p, on=keys, how="left")
    feature_cols = sorted(c for c in out.columns if c not in keys)
    return out.select(
        pl.col("_setup").cast(pl.String).alias("setup"),
        pl.col("_level").cast(pl.Float64).alias("level"),
        pl.col("_rep").cast(pl.Int64).alias("rep"),
        pl.col("window").cast(pl.Int64),
        *(pl.col(c).cast(pl.Float64) for c in feature_cols),
    ).sort("setup", "level", "rep", "window")


def _across_tiers(long: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """``anytier.<metric>:<stat>``: the largest value over the server tiers that have the
    metric, so one feature says "some tier's CPU is at its quota" whichever tier it is."""
    server = long.filter(~pl.col("tier").is_in([CLIENT, HOST]))
    shared = (
        server.group_by("metric").agg(pl.col("tier").n_unique().alias("n")).filter(pl.col("n") > 1)
    )
    best = (
        server.join(shared.select("metric"), on="metric")
        .group_by(*keys, "metric", "stat")
        .agg(pl.col("value").max())
        .with_columns(
            pl.concat_str(pl.lit(f"{ANY_TIER}."), "metric", pl.lit(":"), "stat").alias("name")
        )
    )
    return best.pivot(on="name", index=keys, values="value")


def _windowed(placed: pl.LazyFrame, time: str, window_s: float) -> pl.LazyFrame:
    """Give each row its window index; drop rows in a last, partial window."""
    whole = ((pl.col("t_end") - pl.col("t_start")) / window_s + 1e-9).floor()
    return placed.with_columns(
        ((pl.col(time) - pl.col("t_start")) / window_s).floor().cast(pl.Int64).alias("window"),
        whole.cast(pl.Int64).alias("_whole"),
    ).filter(pl.col("window") < pl.col("_whole"))


# ---- run folders -------------------------------------------------------------------------------
def _setup_tier(bottlenecks: list[dict[str, Any]], labels: dict[float, str]) -> str | None:
    primaries = [
        (b["primary"] or {}).get("tier")
        for b in bottlenecks
        if b.get("primary") and labels.get(b["level"]) in ("gray", "server")
    ]
    primaries = [p for p in primaries if p]
    if not primaries:
        primaries = [b["primary"]["tier"] for b in bottlenecks if b.get("primary")]
    if not primaries:
        return None
    return Counter(primaries).most_common(1)[0][0]


def from_run(
    path: Path, window_s: float, *, name: str | None = None, indicator_p: float = INDICATOR_P
) -> Dataset:
    """Observations of one run folder; setups are named ``<name>`` (one setup) or
    ``<name>/<setup>`` (several). Labels come from its analysis (``analysis.json`` when it has
    one, else computed now); so do the indicator categories when that analysis used
    ``indicator_p`` as the significance of a trend change, else they are computed with it."""
    from tierscope.analysis import analyze, steady_windows
    from tierscope.store import read_analysis, read_run

    run = read_run(path)
    doc = read_analysis(path) or analyze(run, AnalysisOptions())
    windows = steady_windows(run)
    frame = window_features(run.metrics, windows, window_s, run.requests)
    name = name or path.name
    run_setups = sorted(frame["setup"].unique().to_list()) if frame.height else []
    rename = {s: name if len(run_setups) == 1 else f"{name}/{s}" for s in run_setups}
    sat = {
        (s["setup"], float(c["level"])): c["label"] for s in doc["saturation"] for c in s["curve"]
    }
    tiers: dict[str, str | None] = {}
    for s in run_setups:
        own = {lv: lab for (ss, lv), lab in sat.items() if ss == s}
        tiers[s] = _setup_tier([b for b in doc["bottlenecks"] if b["setup"] == s], own)
    setups = frame["setup"].to_list()
    levels = frame["level"].to_list()
    categories: dict[str, dict[str, str]] = {}
    options = AnalysisOptions(change_p=indicator_p)
    found = _analysed_categories(doc, options)
    if found is None and run.points is not None and run.points.height:
        levels_frame = indicator_analysis.metric_levels(run.metrics, run.points, windows)
        found, _ = indicator_analysis.analyze_indicators(levels_frame, doc["saturation"], options)
    for ind in found or []:
        for s, cat in ind["per_setup"].items():
            if s in rename:
                categories.setdefault(rename[s], {})[ind["metric"]] = cat
    features = frame.drop(*ID_COLUMNS)
    ids = frame.select(ID_COLUMNS).with_columns(pl.col("setup").replace_strict(rename))
    return Dataset(
        features=features,
        ids=ids,
        labels={
            "saturation": [sat.get((s, float(lv))) for s, lv in zip(setups, levels, strict=True)],
            "tier": [tiers.get(s) for s in setups],
        },
        categories=categories,
        window_s=window_s,
        sources=[str(path)],
    )


#: The analysis options that decide an indicator category (:func:`indicators.classify_pattern`).
CATEGORY_OPTIONS = ("change_p", "min_effect", "permutations", "seed")
_CATEGORIES = AnalysisOptions(change_p=INDICATOR_P)


def _analysed_categories(
    doc: dict[str, Any], options: AnalysisOptions
) -> list[dict[str, Any]] | None:
    """The indicators of the run's saved analysis when it judged them with ``options`` (then
    the categories are those a new computation would give, at no cost: the permutation tests
    behind them are most of the time of reading a corpus), else None."""
    saved = doc.get("options") or {}
    wanted = options.model_dump()
    if any(saved.get(k) != wanted[k] for k in CATEGORY_OPTIONS):
        return None
    found = doc.get("indicators")
    if not isinstance(found, list) or not all(
        isinstance(d, dict) and isinstance(d.get("per_setup"), dict) and "metric" in d
        for d in found
    ):
        return None
    return found


def _run_folders(path: Path) -> list[Path]:
    """A run folder, a corpus folder (corpus.json), or a folder of run folders."""
    from tierscope.store import is_run

    if is_run(path):
        return [path]
    manifest = path / "corpus.json"
    if manifest.is_file():
        try:
            names = [s["name"] for s in json.loads(manifest.read_text())["setups"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError("corpus.json", str(manifest), f"a corpus manifest ({exc})") from None
        return [path / n for n in names if is_run(path / n)]
    found = sorted(p for p in path.iterdir() if is_run(p))
    if not found:
        raise InputError("DATA", str(path), "a run folder, a corpus folder or a folder of runs")
    return found


# ---- tables ------------------------------------------------------------------------------------
def read_table(path: Path) -> pl.DataFrame:
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return pl.read_parquet(path)
        if suffix == ".csv":
            return pl.read_csv(path, infer_schema_length=10_000)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError("DATA", str(path), f"a readable table ({exc})") from None
    raise InputError("DATA", str(path), "a .parquet or .csv table, or run folders")


def from_table(path: Path, options: AnalysisOptions | None = None) -> Dataset:
    """Observations of a table (module docstring)."""
    options = options or AnalysisOptions(change_p=INDICATOR_P)
    table = read_table(path)
    missing = [c for c in ("setup", "level") if c not in table.columns]
    if missing:
        raise InputError(
            "columns", table.columns, f"columns {', '.join(missing)}", source=str(path)
        )
    for col, default in (("rep", 0), ("window", None)):
        if col not in table.columns:
            table = table.with_columns(
                pl.int_range(pl.len()).over("setup", "level", "rep").alias(col)
                if default is None
                else pl.lit(default).alias(col)
            )
    ids = table.select(
        pl.col("setup").cast(pl.String),
        pl.col("level").cast(pl.Float64),
        pl.col("rep").cast(pl.Int64),
        pl.col("window").cast(pl.Int64),
    )
    numeric = [
        c
        for c, t in table.schema.items()
        if c not in ID_COLUMNS and c not in LABEL_COLUMNS and t.is_numeric()
    ]
    if not numeric:
        raise InputError("columns", table.columns, "numeric feature columns", source=str(path))
    features = table.select(pl.col(c).cast(pl.Float64) for c in numeric)
    setups = ids["setup"].to_list()
    levels = ids["level"].to_list()
    label_col = next((c for c in ("label", "saturation") if c in table.columns), None)
    if label_col is not None:
        sat: list[str | None] = [
            None if v is None else str(v) for v in table[label_col].cast(pl.String).to_list()
        ]
        bad = sorted({v for v in sat if v is not None and v not in SATURATION_CLASSES})
        if bad:
            raise InputError(label_col, bad, "client, gray or server", source=str(path))
    elif "throughput" in table.columns:
        per_level = _labels_from_throughput(ids, table["throughput"], options)
        sat = [per_level.get((s, lv)) for s, lv in zip(setups, levels, strict=True)]
    else:
        sat = [None] * table.height
    tier = (
        [None if v is None else str(v) for v in table["tier"].cast(pl.String).to_list()]
        if "tier" in table.columns
        else [None] * table.height
    )
    categories = _table_categories(ids, features, sat, options)
    return Dataset(
        features=features,
        ids=ids,
        labels={"saturation": sat, "tier": tier},
        categories=categories,
        window_s=math.nan,
        sources=[str(path)],
    )


def _labels_from_throughput(
    ids: pl.DataFrame, throughput: pl.Series, options: AnalysisOptions
) -> dict[tuple[str, float], str]:
    means = (
        ids.with_columns(throughput.cast(pl.Float64).alias("x"))
        .group_by("setup", "level")
        .agg(pl.col("x").mean())
        .sort("setup", "level")
    )
    out: dict[tuple[str, float], str] = {}
    for (setup,), frame in means.group_by("setup", maintain_order=True):
        x = frame["x"].to_list()
        if any(v is None or not math.isfinite(v) for v in x):
            continue
        th95, th_limit = saturation_analysis.thresholds(
            max(x), options.margin, options.peak_fraction
        )
        for lv, lab in zip(
            frame["level"].to_list(),
            saturation_analysis.label_levels(x, th95, th_limit),
            strict=True,
        ):
            out[(str(setup), float(lv))] = lab
    return out


def _table_categories(
    ids: pl.DataFrame, features: pl.DataFrame, sat: list[str | None], options: AnalysisOptions
) -> dict[str, dict[str, str]]:
    """Indicator category of every metric column per setup, from its per-level means."""
    frame = pl.concat([ids, features], how="horizontal").with_columns(
        pl.Series("_label", sat, dtype=pl.String)
    )
    curves = (
        frame.filter(pl.col("_label").is_not_null())
        .group_by("setup", "level")
        .agg(pl.col("_label").first())
        .sort("setup", "level")
    )
    entries = [
        {
            "setup": s,
            "curve": [
                {"level": lv, "label": lab} for lv, lab in zip(f["level"], f["_label"], strict=True)
            ],
        }
        for (s,), f in curves.group_by("setup", maintain_order=True)
    ]
    metric_cols = [c for c in features.columns if "." in c]
    if not entries or not metric_cols:
        return {}
    levels = (
        frame.group_by("setup", "level")
        .agg(pl.col(c).mean() for c in metric_cols)
        .unpivot(index=["setup", "level"], variable_name="name", value_name="value")
        .filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan())
        .with_columns(pl.col("name").str.split(".").list.first().alias("tier"))
        .sort("name", "setup", "level")
    )
    found, _ = indicator_analysis.analyze_indicators(levels, entries, options)
    out: dict[str, dict[str, str]] = {}
    for ind in found:
        for s, cat in ind["per_setup"].items():
            out.setdefault(s, {})[ind["metric"]] = cat
    return out


# ---- any DATA ----------------------------------------------------------------------------------
def load_dataset(
    paths: Sequence[Path],
    window_s: float = 1.0,
    *,
    jobs: int = -1,
    progress: Callable[[str, int, int], None] | None = None,
) -> Dataset:
    """DATA of ``tierscope learn``: one table, or run/corpus folders (several allowed), read
    by ``jobs`` worker processes (-1: one per core); ``progress("reading runs", done, total)``
    (else :func:`tierscope.progress.step`) after each run."""
    from tierscope.store import read_analysis

    if not paths:
        raise InputError("DATA", None, "a table or run folders")
    for p in paths:
        if not p.exists():
            raise InputError("DATA", str(p), "an existing table or folder")
    if len(paths) == 1 and paths[0].is_file():
        return from_table(paths[0])
    if any(p.is_file() for p in paths):
        raise InputError("DATA", [str(p) for p in paths], "one table, or run folders only")
    runs = [r for p in paths for r in _run_folders(p)]
    names = [r.name for r in runs]
    if len(set(names)) != len(names):  # same folder names under different parents
        names = [f"{r.parent.name}/{r.name}" for r in runs]
    parts = []
    report = progress or step
    report(READING, 0, len(runs))
    # worker processes only pay for their start when categories are to be computed
    fresh = sum(_analysed_categories(read_analysis(r) or {}, _CATEGORIES) is None for r in runs)
    tasks = (delayed(from_run)(r, window_s, name=n) for r, n in zip(runs, names, strict=True))
    for part in Parallel(n_jobs=jobs if fresh > 1 else 1, return_as="generator")(tasks):
        parts.append(part)
        report(READING, len(parts), len(runs))
    parts = [p for p in parts if p.features.height]
    if not parts:
        raise InputError("DATA", [str(p) for p in paths], "runs with metrics in steady windows")
    return Dataset(
        features=pl.concat([p.features for p in parts], how="diagonal_relaxed"),
        ids=pl.concat([p.ids for p in parts]),
        labels={k: [x for p in parts for x in p.labels[k]] for k in ("saturation", "tier")},
        categories={k: v for p in parts for k, v in p.categories.items()},
        window_s=window_s,
        sources=[s for p in parts for s in p.sources],
    )


__all__ = [
    "RESOURCE_METRICS",
    "SATURATION_CLASSES",
    "STATS",
    "WAITING_METRICS",
    "Dataset",
    "from_run",
    "from_table",
    "in_set",
    "load_dataset",
    "metric_of",
    "window_features",
]
