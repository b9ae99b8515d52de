"""Classify current metrics with a saved model: client / gray / server and the limiting tier.

METRICS is a CSV of recent samples, long (``t, tier, [node,] metric, value``, the layout of
``metrics.parquet``) or wide (``t`` and one ``tier.metric`` column per metric), or a run folder,
finished or still being written (its parts are read). The last ``window_s`` seconds (the
model's window) become one observation with the same features as in training.

Design decision: a feature the model knows but the window lacks is left missing and filled by
the pipeline's imputer (the training median), so one absent gauge does not stop monitoring; when
more than half are missing the metrics do not belong to this model and the input is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tierscope.errors import InputError
from tierscope.learn.features import read_table, window_features

MAX_MISSING = 0.5


def _long(frame: pl.DataFrame, source: str) -> pl.DataFrame:
    if {"t", "tier", "metric", "value"} <= set(frame.columns):
        return frame.select(
            pl.col("t").cast(pl.Float64),
            pl.col("tier").cast(pl.String),
            pl.col("metric").cast(pl.String),
            pl.col("value").cast(pl.Float64),
        )
    if "t" not in frame.columns:
        raise InputError(
            "columns",
            frame.columns,
            "t,tier,metric,value or t plus tier.metric columns",
            source=source,
        )
    wide = [c for c in frame.columns if "." in c and frame.schema[c].is_numeric()]
    if not wide:
        raise InputError("columns", frame.columns, "tier.metric columns", source=source)
    return (
        frame.select(pl.col("t").cast(pl.Float64), *(pl.col(c).cast(pl.Float64) for c in wide))
        .unpivot(index="t", variable_name="name", value_name="value")
        .with_columns(
            pl.col("name").str.split_exact(".", 1).struct.rename_fields(["tier", "metric"])
        )
        .unnest("name")
        .select("t", "tier", "metric", "value")
    )


def read_window(path: Path, window_s: float) -> tuple[pl.DataFrame, dict[str, float]]:
    """One observation (features) of the last ``window_s`` seconds of ``path``."""
    requests = None
    if path.is_dir():
        from tierscope.store import scan_table

        lazy = scan_table(path, "metrics")
        if lazy is None:
            raise InputError("METRICS", str(path), "a run folder with metrics")
        metrics = _long(lazy.collect(), str(path))
        rq = scan_table(path, "requests")
        requests = rq.select("tier", "start", "end").collect() if rq is not None else None
    elif path.is_file():
        metrics = _long(read_table(path), str(path))
    else:
        raise InputError("METRICS", str(path), "a CSV of metrics or a run folder")
    metrics = metrics.filter(pl.col("t").is_not_null())
    if metrics.height == 0:
        raise InputError("METRICS", str(path), "metric samples (it has none)")
    times = metrics["t"].unique().sort()
    step = float(times.diff().drop_nulls().median() or 0.0) if times.len() > 1 else 0.0
    t_end = float(times.max()) + max(step, 1e-9)
    t_start = t_end - window_s
    if float(times.min()) > t_start + step + 1e-9:
        raise InputError(
            "METRICS",
            str(path),
            f"at least {window_s:g} s of samples (the model's window); it spans "
            f"{t_end - float(times.min()):.3g} s",
        )
    windows = pl.DataFrame(
        {"setup": ["live"], "level": [0.0], "rep": [0], "t_start": [t_start], "t_end": [t_end]}
    )
    frame = window_features(metrics, windows, window_s, requests)
    return frame, {"t_start": t_start, "t_end": t_end}


def _predict(bundle: dict[str, Any], frame: pl.DataFrame) -> dict[str, Any]:
    """Per target: (classes, probabilities [rows x classes]) for the rows of ``frame``."""
    info = bundle["info"]
    X = frame.select(
        *(pl.col(f) if f in frame.columns else pl.lit(None, pl.Float64).alias(f)
          for f in info.features)
    ).to_numpy().astype(float)  # fmt: skip
    out = {}
    for target, estimator in bundle["estimators"].items():
        classes = [str(c) for c in estimator.classes_]
        if hasattr(estimator, "predict_proba"):
            probs = np.asarray(estimator.predict_proba(X))
        else:  # a model without probabilities (SVM): all mass on its prediction
            pred = np.asarray(estimator.predict(X)).astype(str)
            probs = np.array([[float(c == p) for c in classes] for p in pred])
        out[target] = (classes, probs)
    return out


def classify_run(bundle: dict[str, Any], run: Any) -> list[dict[str, Any]]:
    """The model's answer for every observation window of a run's steady phases."""
    from tierscope.analysis import steady_windows

    info = bundle["info"]
    frame = window_features(run.metrics, steady_windows(run), info.window_s, run.requests)
    if not frame.height:
        return []
    answers = _predict(bundle, frame)
    rows = []
    for i, (setup, level, rep, window) in enumerate(
        frame.select("setup", "level", "rep", "window").iter_rows()
    ):
        row: dict[str, Any] = {"setup": setup, "level": level, "rep": rep, "window": window}
        for target, (classes, probs) in answers.items():
            best = int(np.argmax(probs[i]))
            row[target] = classes[best]
            row[f"{target}_p"] = float(probs[i][best])
        rows.append(row)
    return rows


def learned_indicators(
    bundle: dict[str, Any], run: Any, analysis: dict[str, Any]
) -> dict[str, Any]:
    """The report's "learned indicators": what the model learnt (its cross-validated scores
    and most important metrics) and its answer per load level of this run, beside the labels
    of the analysis (majority over the level's windows)."""
    from collections import Counter

    info = bundle["info"]
    labels = {
        (s["setup"], c["level"]): c["label"] for s in analysis["saturation"] for c in s["curve"]
    }
    primary = {
        (b["setup"], b["level"]): (b["primary"] or {}).get("tier") for b in analysis["bottlenecks"]
    }
    per_level: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for row in classify_run(bundle, run):
        per_level.setdefault((row["setup"], row["level"]), []).append(row)
    levels = []
    for (setup, level), rows in sorted(per_level.items()):
        entry: dict[str, Any] = {
            "setup": setup,
            "level": level,
            "windows": len(rows),
            "label": labels.get((setup, level)),
            "bottleneck_tier": primary.get((setup, level)),
        }
        for target in bundle["estimators"]:
            votes = Counter(r[target] for r in rows)
            answer, n = votes.most_common(1)[0]
            entry[target] = answer
            entry[f"{target}_share"] = n / len(rows)
        levels.append(entry)
    return {
        "targets": info.targets,
        "evaluation": info.evaluation,
        "window_s": info.window_s,
        "levels": levels,
    }


def classify(bundle: dict[str, Any], path: Path) -> dict[str, Any]:
    """The prediction document of ``tierscope classify``."""
    info = bundle["info"]
    frame, span = read_window(path, info.window_s)
    present = [f for f in info.features if f in frame.columns]
    missing = len(info.features) - len(present)
    if not frame.height or missing > MAX_MISSING * len(info.features):
        raise InputError(
            "METRICS",
            str(path),
            f"the metrics the model was trained on ({missing} of its {len(info.features)} "
            "features are missing: another system or another window length?)",
        )
    out: dict[str, Any] = {"window": span, "missing_features": missing}
    for target, (classes, probs) in _predict(bundle, frame.head(1)).items():
        best = int(np.argmax(probs[0]))
        out[target] = {
            "class": classes[best],
            "probabilities": {c: float(p) for c, p in zip(classes, probs[0], strict=True)},
            "model": info.targets[target]["model"],
        }
    return out


__all__ = ["classify", "classify_run", "learned_indicators", "read_window"]
