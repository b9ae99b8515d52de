"""Cross-validate every model on a data set: the document of ``tierscope learn``.

For each fold of the scheme: the feature columns (for ``recommended``, chosen from the fold's
training setups), the majority class of the data (the thesis's baseline, scored like a model),
and every model fitted on the training rows and scored on the test rows. Then: the scores of
:mod:`.scores` per model, the best model (accuracy, then balanced accuracy), its accuracy per
held-out setup, its grouped permutation importance on a few folds, and every feature set scored
with the best model side by side (the thesis's comparison of All / Recommended / Server-side /
RC / RT / WT).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from joblib import Parallel, delayed

from tierscope.errors import InputError
from tierscope.learn import models as model_registry
from tierscope.learn import scores
from tierscope.learn.crossval import Fold, folds, spread
from tierscope.learn.features import SATURATION_CLASSES, Dataset, metric_of
from tierscope.spec.learn import FEATURE_SETS, LearnDocument, LearnOptions

#: Folds of the side-by-side feature-set comparison (evenly spread over the scheme's folds).
COMPARE_MAX_FOLDS = 60
TOP_IMPORTANCE = 15
#: ``progress(stage, done, total)``: called after every fold.
Progress = Callable[[str, int, int], None]


def _classes(target: str, y: np.ndarray) -> list[str]:
    present = set(y.tolist())
    if target == "saturation":
        return [c for c in SATURATION_CLASSES if c in present]
    return sorted(present)


class _Columns:
    """Column indices of a feature set, per fold (``recommended`` depends on the fold)."""

    def __init__(self, data: Dataset, feature_set: str) -> None:
        self.data = data
        self.feature_set = feature_set
        self.index = {f: i for i, f in enumerate(data.feature_names)}
        self.fixed = (
            None
            if feature_set == "recommended"
            else [self.index[f] for f in data.feature_set(feature_set)]
        )
        self.fallbacks = 0

    def of(self, fold: Fold) -> list[int]:
        if self.fixed is not None:
            return self.fixed
        train_setups = sorted(set(self.data.setups[fold.train].tolist()))
        chosen = [self.index[f] for f in self.data.recommended(train_setups)]
        if not chosen:  # no reliable metric in these setups: fall back to server-side metrics
            self.fallbacks += 1
            chosen = [self.index[f] for f in self.data.feature_set("server")]
        return chosen


def _run_fold(
    fold: Fold,
    X: np.ndarray,
    y: np.ndarray,
    cols: list[int],
    model_names: tuple[str, ...],
    seed: int,
) -> dict[str, np.ndarray]:
    Xtr, Xte = X[np.ix_(fold.train, cols)], X[np.ix_(fold.test, cols)]
    ytr = y[fold.train]
    # the thesis's baseline: always the majority class of the whole data set (the majority of
    # the training folds would be biased low: holding out two setups of a class makes it rarer)
    majority = Counter(y.tolist()).most_common(1)[0][0]
    out = {"_baseline": np.full(fold.test.size, majority, dtype=object)}
    for name in model_names:
        out[name] = np.asarray(model_registry.fit(name, Xtr, ytr, seed).predict(Xte), dtype=object)
    return out


def _cross_validate(
    X: np.ndarray,
    y: np.ndarray,
    used: list[Fold],
    columns: _Columns,
    model_names: tuple[str, ...],
    options: LearnOptions,
    progress: Progress | None = None,
    stage: str = "cross-validation",
) -> list[dict[str, np.ndarray]]:
    col_sets = [columns.of(f) for f in used]
    jobs = (
        delayed(_run_fold)(f, X, y, c, model_names, options.seed)
        for f, c in zip(used, col_sets, strict=True)
    )
    out = []
    for result in Parallel(n_jobs=options.jobs, return_as="generator")(jobs):
        out.append(result)
        if progress is not None:
            progress(stage, len(out), len(used))
    return out


def _score(
    name: str, used: list[Fold], preds: list[dict[str, np.ndarray]], y: np.ndarray,
    classes: list[str], target: str,
) -> dict[str, Any]:  # fmt: skip
    per_fold = [scores.accuracy(y[f.test], p[name]) for f, p in zip(used, preds, strict=True)]
    y_true = np.concatenate([y[f.test] for f in used])
    y_pred = np.concatenate([p[name] for p in preds])
    matrix = scores.confusion(y_true, y_pred, classes)
    return {
        "accuracy": float(np.mean(per_fold)),
        "accuracy_std": float(np.std(per_fold)),
        "balanced_accuracy": scores.balanced_accuracy(matrix),
        "major_mistake_rate": (
            scores.major_mistake_rate(y_true, y_pred) if target == "saturation" else None
        ),
        "confusion": {"labels": classes, "matrix": matrix.tolist()},
    }


def evaluate(
    data: Dataset, options: LearnOptions, progress: Progress | None = None
) -> dict[str, Any]:
    """Cross-validate ``options.models`` on ``data``; the learn document (LearnDocument)."""
    target = options.target
    data = data.labelled(target)
    y = np.asarray(data.labels[target], dtype=object)
    classes = _classes(target, y)
    if len(classes) < 2:
        raise InputError(
            "labels", classes, f"at least two '{target}' classes in the data", source=None
        )
    all_folds = folds(data.setups, data.levels, options.scheme)
    used = spread(all_folds, options.max_folds)
    columns = _Columns(data, options.features)
    if columns.fixed is not None and not columns.fixed:
        raise InputError(
            "--features",
            options.features,
            f"a feature set with metrics in DATA (none of its {len(data.feature_names)} "
            f"features is a '{options.features}' metric)",
        )
    X = data.features.to_numpy().astype(float)
    preds = _cross_validate(X, y, used, columns, options.models, options, progress)
    notes: list[str] = []
    if columns.fallbacks:
        notes.append(
            f"{columns.fallbacks} folds had no reliable metric in their training setups: "
            "they used the server-side set instead of 'recommended'"
        )
    model_scores = {m: _score(m, used, preds, y, classes, target) for m in options.models}
    baseline = _score("_baseline", used, preds, y, classes, target)
    best = max(
        options.models,
        key=lambda m: (model_scores[m]["accuracy"], model_scores[m]["balanced_accuracy"]),
    )
    shares = Counter(y.tolist())
    doc: dict[str, Any] = {
        "scheme": options.scheme,
        "target": target,
        "features": options.features,
        "baseline": baseline["accuracy"],
        "baseline_detail": baseline,
        "majority_class": shares.most_common(1)[0][0],
        "class_shares": {c: shares[c] / y.size for c in classes},
        "models": model_scores,
        "best": best,
        "per_setup": _per_setup(data, used, preds, y, best),
        "importance": _importance(data, X, y, used, columns, best, options),
        "feature_sets": (
            _compare_sets(data, X, y, used, classes, best, options, progress)
            if options.compare_features
            else {}
        ),
        "observations": int(y.size),
        "setups": len(set(data.setups.tolist())),
        "levels": len(set(data.levels.tolist())),
        "n_features": len(columns.fixed) if columns.fixed is not None else None,
        "folds": len(used),
        "folds_total": len(all_folds),
        "window_s": data.window_s if np.isfinite(data.window_s) else None,
        "notes": notes,
    }
    return LearnDocument.model_validate(doc).model_dump(mode="json")


def _per_setup(
    data: Dataset, used: list[Fold], preds: list[dict[str, np.ndarray]], y: np.ndarray, best: str
) -> dict[str, float]:
    hits: dict[str, list[bool]] = {}
    for f, p in zip(used, preds, strict=True):
        for s, t, q in zip(data.setups[f.test], y[f.test], p[best], strict=True):
            hits.setdefault(str(s), []).append(t == q)
    return {s: float(np.mean(v)) for s, v in sorted(hits.items())}


def _importance(
    data: Dataset, X: np.ndarray, y: np.ndarray, used: list[Fold], columns: _Columns,
    best: str, options: LearnOptions,
) -> list[dict[str, Any]]:  # fmt: skip
    if options.importance_folds == 0:
        return []
    names = data.feature_names
    totals: dict[str, list[float]] = {}
    for i, fold in enumerate(spread(used, options.importance_folds)):
        cols = columns.of(fold)
        Xtr, Xte = X[np.ix_(fold.train, cols)], X[np.ix_(fold.test, cols)]
        model = model_registry.fit(best, Xtr, y[fold.train], options.seed)
        groups: dict[str, list[int]] = {}
        for j, c in enumerate(cols):
            groups.setdefault(metric_of(names[c]), []).append(j)
        drops = scores.grouped_permutation_importance(
            model.predict, Xte, y[fold.test], groups, seed=options.seed + i
        )
        for metric, d in drops.items():
            totals.setdefault(metric, []).append(d)
    if totals and max(max(v) for v in totals.values()) <= 0:
        return []  # no single metric matters: the model has redundant evidence
    ranked = sorted(
        ({"metric": m, "accuracy_drop": float(np.mean(v))} for m, v in totals.items()),
        key=lambda d: -d["accuracy_drop"],
    )
    return ranked[:TOP_IMPORTANCE]


def _compare_sets(
    data: Dataset, X: np.ndarray, y: np.ndarray, used: list[Fold], classes: list[str],
    best: str, options: LearnOptions, progress: Progress | None,
) -> dict[str, Any]:  # fmt: skip
    sub = spread(used, COMPARE_MAX_FOLDS)
    out: dict[str, Any] = {}
    for name in FEATURE_SETS:
        columns = _Columns(data, name)
        if columns.fixed is not None and not columns.fixed:
            out[name] = {"model": best, "available": False, "reason": "no such metric in DATA"}
            continue
        preds = _cross_validate(
            X, y, sub, columns, (best,), options, progress, f"feature set {name}"
        )
        entry = _score(best, sub, preds, y, classes, options.target)
        entry.pop("confusion")
        out[name] = {
            "model": best,
            "available": True,
            **entry,
            "n_features": len(columns.fixed) if columns.fixed is not None else None,
            "folds": len(sub),
            "fallback_folds": columns.fallbacks,
        }
    return out


__all__ = ["COMPARE_MAX_FOLDS", "evaluate"]
