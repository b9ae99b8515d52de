"""Scores of a cross-validation: accuracy (mean over folds, as the thesis reports it), balanced
accuracy and confusion matrix (pooled over every prediction of every fold), the "major mistake"
rate of seed 000 (L2516) and grouped permutation importance.

Major mistakes: a ``gray`` prediction is the decision "add server resources", like ``server``;
any decision on a truly gray observation counts as right; the mistakes are deciding for the
server side when the truth is ``client`` and for the client side when it is ``server``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: Rows per prediction call of :func:`grouped_permutation_importance`.
BATCH_ROWS = 50_000


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(np.asarray(y_true) == np.asarray(y_pred))) if len(y_true) else float("nan")


def confusion(y_true: Sequence[Any], y_pred: Sequence[Any], labels: Sequence[str]) -> np.ndarray:
    """Counts, rows = true class, columns = predicted class, in ``labels`` order."""
    index = {c: i for i, c in enumerate(labels)}
    out = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for t, p in zip(y_true, y_pred, strict=True):
        out[index[t], index[p]] += 1
    return out


def balanced_accuracy(matrix: np.ndarray) -> float:
    """Mean recall over the classes that occur."""
    totals = matrix.sum(axis=1)
    present = totals > 0
    if not present.any():
        return float("nan")
    return float(np.mean(np.diag(matrix)[present] / totals[present]))


def major_mistake_rate(y_true: Sequence[str], y_pred: Sequence[str]) -> float:
    """Share of predictions that are major mistakes (module docstring)."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    if not y_true.size:
        return float("nan")
    server_side = np.isin(y_pred, ("gray", "server"))
    wrong = ((y_true == "client") & server_side) | ((y_true == "server") & ~server_side)
    return float(np.mean(wrong))


def grouped_permutation_importance(
    predict: Callable[[np.ndarray], np.ndarray],
    X: np.ndarray,
    y: np.ndarray,
    groups: dict[str, list[int]],
    *,
    repeats: int = 3,
    seed: int = 0,
) -> dict[str, float]:
    """Mean drop in accuracy when the columns of one group (all statistics of one metric) are
    shuffled together across rows; computed on held-out rows. The shuffled copies are
    predicted together, in calls of at most :data:`BATCH_ROWS` rows (a prediction is row by
    row, so batching changes nothing but the number of calls)."""
    rng = np.random.default_rng(seed)
    n = X.shape[0]
    shuffles = [(cols, rng.permutation(n)) for cols in groups.values() for _ in range(repeats)]
    if n == 0:
        return {name: float("nan") for name in groups}
    base = accuracy(y, predict(X))
    drops: list[float] = []
    per_call = max(1, BATCH_ROWS // n)
    for i in range(0, len(shuffles), per_call):
        chunk = shuffles[i : i + per_call]
        batch = np.tile(X, (len(chunk), 1))
        for k, (cols, order) in enumerate(chunk):
            batch[k * n : (k + 1) * n, cols] = X[order][:, cols]
        predicted = np.asarray(predict(batch))
        drops += [base - accuracy(y, predicted[k * n : (k + 1) * n]) for k in range(len(chunk))]
    return {
        name: float(np.mean(drops[k * repeats : (k + 1) * repeats]))
        for k, name in enumerate(groups)
    }


__all__ = [
    "accuracy",
    "balanced_accuracy",
    "confusion",
    "grouped_permutation_importance",
    "major_mistake_rate",
]
