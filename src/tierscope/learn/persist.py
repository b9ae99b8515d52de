"""Saved models: fit the final classifiers on a whole data set, write and read them.

A model file (joblib) holds one fitted pipeline per target (``saturation`` and, when the data
has its labels, ``tier``) and a :class:`~tierscope.spec.learn.SavedModelInfo`: the feature
columns in order, the window length they were computed over, the classes, the tierscope and
scikit-learn versions. ``classify`` needs nothing else to turn fresh metrics into a prediction.

Design decisions: the target that ``learn`` cross-validated gets its best model; the other
target gets a random forest (the thesis's most consistently good model), marked
``"evaluated": false``. A joblib file runs code when loaded, like any pickle: load only model
files you made or trust (docs/learning.md says so too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import joblib
import numpy as np
import sklearn

from tierscope import __version__
from tierscope.errors import InputError
from tierscope.learn import models as model_registry
from tierscope.learn.features import Dataset
from tierscope.spec.learn import TARGETS, SavedModelInfo

FALLBACK_MODEL = "random_forest"


def train(
    data: Dataset,
    *,
    target: str,
    model: str,
    feature_set: str,
    seed: int = 0,
    evaluation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The bundle ``{"info": SavedModelInfo, "estimators": {target: pipeline}}`` fitted on all
    of ``data`` (what :func:`load` returns too)."""
    columns = data.feature_set(feature_set)
    if not columns and feature_set == "recommended":
        columns = data.feature_set("server")
    if not columns:
        raise InputError("--features", feature_set, "a feature set with metrics in DATA")
    estimators: dict[str, Any] = {}
    targets: dict[str, dict[str, Any]] = {}
    for name in TARGETS:
        labels = data.labels.get(name) or []
        if not any(v is not None for v in labels):
            continue
        part = data.labelled(name)
        y = np.asarray(part.labels[name], dtype=object)
        X = part.features.select(columns).to_numpy().astype(float)
        chosen = model if name == target else FALLBACK_MODEL
        estimators[name] = model_registry.fit(chosen, X, y, seed)
        targets[name] = {
            "model": chosen,
            "evaluated": name == target,
            "feature_set": feature_set,
            "classes": [str(c) for c in estimators[name].classes_],
            "observations": int(y.size),
        }
    if target not in estimators:
        raise InputError("labels", target, f"'{target}' labels to train on")
    info = SavedModelInfo(
        tierscope_version=__version__,
        sklearn_version=sklearn.__version__,
        window_s=float(data.window_s) if np.isfinite(data.window_s) else 1.0,
        features=columns,
        targets=targets,
        evaluation=_summary(evaluation) if evaluation is not None else None,
    )
    return {"info": info, "estimators": estimators}


def _summary(doc: dict[str, Any]) -> dict[str, Any]:
    best = doc["models"][doc["best"]]
    return {
        "scheme": doc["scheme"],
        "target": doc["target"],
        "features": doc["features"],
        "baseline": doc["baseline"],
        "best": doc["best"],
        "accuracy": best["accuracy"],
        "balanced_accuracy": best["balanced_accuracy"],
        "major_mistake_rate": best["major_mistake_rate"],
        "setups": doc["setups"],
        "folds": doc["folds"],
        "importance": doc["importance"],
    }


def save(bundle: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # the info goes in as plain data, so a file stays readable when the schema gains fields
    joblib.dump(
        {"info": bundle["info"].model_dump(mode="json"), "estimators": bundle["estimators"]},
        path,
        compress=3,
    )
    return path


def load(path: Path) -> dict[str, Any]:
    """Read a model file; InputError when it is not one."""
    if not path.is_file():
        raise InputError("MODEL", str(path), "a model file written by 'tierscope learn --save'")
    try:
        bundle = joblib.load(path)
        info = SavedModelInfo.model_validate(bundle["info"])
    except Exception as exc:
        raise InputError(
            "MODEL", str(path), f"a model file written by 'tierscope learn --save' ({exc})"
        ) from None
    return {"info": info, "estimators": bundle["estimators"]}


__all__ = ["FALLBACK_MODEL", "load", "save", "train"]
