"""Cross-validate every model on a data set: the document of ``tierscope learn``.

For each fold of the scheme: the feature columns (for ``recommended``, chosen from the fold's
training setups), the majority class of the data (the thesis's baseline, scored like a model),
and every model fitted on the training rows and scored on the test rows. Then: the scores of
:mod:`.scores` per model, the best model (accuracy, then balanced accuracy), its accuracy per
held-out setup, its grouped permutation importance on a few folds, and every feature set scored
with the best model side by side (the thesis's comparison of All / Recommended / Server-side /
RC / RT / WT) on a cover of the observations (:func:`.crossval.cover`: for ``new-setup``, the
disjoint pairs of setups, so that every observation is held out once; at most
:data:`COMPARE_MAX_FOLDS` folds).

Design decisions: the work is a flat list of independent fits (a fold with all its models, a
feature set on a fold, the importance of a fold) run by joblib worker processes (``jobs``; -1:
one per core, unless the data is so small that starting them costs more), each fit
single-threaded: the products in these fits are small, and a threaded BLAS was up to 20 times
slower on them on a busy machine. The feature set that the main
cross-validation already used is not fitted again for the comparison: its predictions on the
cover's folds are the same fits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from joblib import Parallel, delayed
from threadpoolctl import threadpool_limits

from tierscope.errors import InputError
from tierscope.learn import models as model_registry
from tierscope.learn import scores
from tierscope.learn.crossval import Fold, cover, folds, spread
from tierscope.learn.features import SATURATION_CLASSES, Dataset, metric_of
from tierscope.progress import step
from tierscope.spec.learn import FEATURE_SETS, LearnDocument, LearnOptions

#: Folds of the side-by-side feature-set comparison at most (evenly spread over the cover).
COMPARE_MAX_FOLDS = 60
TOP_IMPORTANCE = 15
#: With ``jobs=-1``, fits in this process when the folds' training rows times the models are
#: fewer: starting worker processes (a second or more) would cost more than they save.
PARALLEL_MIN_ROWS = 100_000
#: ``progress(stage, done, total)``: once with ``done=0`` when a stage starts, then after every
#: piece of work it finishes: a fold with all its models, a feature set on a fold, the
#: importance on a fold. Without one, :func:`tierscope.progress.step` gets the same calls.
Progress = Callable[[str, int, int], None]
STAGES = ("cross-validating the models", "comparing the feature sets", "permutation importance")


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


# ---- work run in the worker processes ----------------------------------------------------------
def _fit_fold(
    X: np.ndarray, y: np.ndarray, fold: Fold, cols: list[int], names: tuple[str, ...], seed: int
) -> dict[str, np.ndarray]:
    """Predictions (class codes) of every model ``names`` on the fold's test rows."""
    with threadpool_limits(1):
        return model_registry.fit_predict(
            names, X[np.ix_(fold.train, cols)], y[fold.train], X[np.ix_(fold.test, cols)], seed
        )


def _fold_importance(
    X: np.ndarray, y: np.ndarray, fold: Fold, cols: list[int], groups: dict[str, list[int]],
    best: str, seed: int, shuffle_seed: int,
) -> dict[str, float]:  # fmt: skip
    with threadpool_limits(1):
        model = model_registry.fit(best, X[np.ix_(fold.train, cols)], y[fold.train], seed)
        return scores.grouped_permutation_importance(
            model.predict, X[np.ix_(fold.test, cols)], y[fold.test], groups, seed=shuffle_seed
        )


def _run(parallel: Parallel, tasks: list[Any], stage: str, progress: Progress | None) -> list[Any]:
    """Results of ``tasks`` in order, reporting each one done."""
    report = progress or step
    report(stage, 0, len(tasks))
    out = []
    for result in parallel(tasks):
        out.append(result)
        report(stage, len(out), len(tasks))
    return out


# ---- the document ------------------------------------------------------------------------------
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
    names = np.asarray(classes, dtype=object)
    index = {c: i for i, c in enumerate(classes)}
    codes = np.array([index[c] for c in y.tolist()], dtype=np.int64)  # what the workers get
    jobs = options.jobs
    if jobs == -1 and sum(f.train.size for f in used) * len(options.models) < PARALLEL_MIN_ROWS:
        jobs = 1
    # one pool of workers for every stage (1: this process)
    with Parallel(n_jobs=jobs, return_as="generator") as parallel:
        tasks = [
            delayed(_fit_fold)(X, codes, f, columns.of(f), options.models, options.seed)
            for f in used
        ]
        preds = [
            {m: names[p] for m, p in fold_preds.items()}
            for fold_preds in _run(parallel, tasks, STAGES[0], progress)
        ]
        majority = Counter(y.tolist()).most_common(1)[0][0]
        for f, p in zip(used, preds, strict=True):
            # the thesis's baseline: always the majority class of the whole data set (the
            # majority of the training folds would be biased low: holding out two setups of a
            # class makes it rarer)
            p["_baseline"] = np.full(f.test.size, majority, dtype=object)
        model_scores = {m: _score(m, used, preds, y, classes, target) for m in options.models}
        best = max(
            options.models,
            key=lambda m: (model_scores[m]["accuracy"], model_scores[m]["balanced_accuracy"]),
        )
        feature_sets = (
            _compare_sets(parallel, data, X, codes, names, used, preds, classes, best, options,
                          progress)
            if options.compare_features
            else {}
        )  # fmt: skip
        importance = _importance(parallel, data, X, codes, used, columns, best, options, progress)
    notes: list[str] = []
    if columns.fallbacks:
        notes.append(
            f"{columns.fallbacks} folds had no reliable metric in their training setups: "
            "they used the server-side set instead of 'recommended'"
        )
    baseline = _score("_baseline", used, preds, y, classes, target)
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
        "importance": importance,
        "feature_sets": feature_sets,
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
    parallel: Parallel, data: Dataset, X: np.ndarray, codes: np.ndarray, used: list[Fold],
    columns: _Columns, best: str, options: LearnOptions, progress: Progress | None,
) -> list[dict[str, Any]]:  # fmt: skip
    if options.importance_folds == 0:
        return []
    names = data.feature_names
    tasks = []
    for i, fold in enumerate(spread(used, options.importance_folds)):
        cols = columns.of(fold)
        groups: dict[str, list[int]] = {}
        for j, c in enumerate(cols):
            groups.setdefault(metric_of(names[c]), []).append(j)
        tasks.append(
            delayed(_fold_importance)(
                X, codes, fold, cols, groups, best, options.seed, options.seed + i
            )
        )
    totals: dict[str, list[float]] = {}
    for drops in _run(parallel, tasks, STAGES[2], progress):
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
    parallel: Parallel, data: Dataset, X: np.ndarray, codes: np.ndarray, names: np.ndarray,
    used: list[Fold], preds: list[dict[str, np.ndarray]], classes: list[str], best: str,
    options: LearnOptions, progress: Progress | None,
) -> dict[str, Any]:  # fmt: skip
    sub = spread(cover(used), COMPARE_MAX_FOLDS)
    at = {id(f): i for i, f in enumerate(used)}
    y = names[codes]
    entries: dict[str, dict[str, Any]] = {}
    sets: dict[str, tuple[_Columns, list[list[int]]]] = {}
    tasks, owners = [], []
    for name in FEATURE_SETS:
        columns = _Columns(data, name)
        if columns.fixed is not None and not columns.fixed:
            entries[name] = {"model": best, "available": False, "reason": "no such metric in DATA"}
            continue
        col_sets = [columns.of(f) for f in sub]
        sets[name] = (columns, col_sets)
        if name != options.features:  # the main cross-validation's set is fitted already
            for f, cols in zip(sub, col_sets, strict=True):
                tasks.append(delayed(_fit_fold)(X, codes, f, cols, (best,), options.seed))
                owners.append(name)
    fitted: dict[str, list[dict[str, np.ndarray]]] = {}
    for name, result in zip(owners, _run(parallel, tasks, STAGES[1], progress), strict=True):
        fitted.setdefault(name, []).append({best: names[result[best]]})
    for name, (columns, _) in sets.items():
        set_preds = fitted.get(name) or [{best: preds[at[id(f)]][best]} for f in sub]
        entry = _score(best, sub, set_preds, y, classes, options.target)
        entry.pop("confusion")
        entries[name] = {
            "model": best,
            "available": True,
            **entry,
            "n_features": len(columns.fixed) if columns.fixed is not None else None,
            "folds": len(sub),
            "fallback_folds": columns.fallbacks,
        }
    return {name: entries[name] for name in FEATURE_SETS}


__all__ = ["COMPARE_MAX_FOLDS", "STAGES", "evaluate"]
