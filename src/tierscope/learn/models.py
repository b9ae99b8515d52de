"""The classifiers: the thesis's four (decision tree, random forest, SVM, logistic regression)
and gradient boosting, as scikit-learn pipelines.

Design decisions:

* Every pipeline starts with a median imputer, so a metric missing in a window (a tier without
  request records, a gauge not yet read) never stops training or classification.
* SVM and logistic regression get a ``StandardScaler``: both are sensitive to scale (seed 000
  §6.4 item 4; the thesis used neither); the tree models are scale-free and get none.
* Defaults otherwise, as in the thesis, except what recent scikit-learn needs to converge
  (``max_iter``); gradient boosting draws sqrt(features) candidates per split
  (``max_features="sqrt"``): an eighth of the time of the default on a few hundred features, and
  no less accurate on our corpora.
* A fold whose training rows hold one class only gets :class:`Constant` (predicting that class)
  instead of an error from the SVM or the logistic regression.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from sklearn.tree import DecisionTreeClassifier

from tierscope.spec.learn import MODEL_NAMES


def make(name: str, seed: int = 0) -> Pipeline:
    """A fresh, unfitted pipeline for model ``name`` (one of ``MODEL_NAMES``)."""
    steps: list[tuple[str, Any]] = [("impute", SimpleImputer(strategy="median"))]
    if name == "decision_tree":
        steps.append(("model", DecisionTreeClassifier(random_state=seed)))
    elif name == "random_forest":
        steps.append(("model", RandomForestClassifier(n_estimators=100, random_state=seed)))
    elif name == "svm":
        steps += [("scale", StandardScaler()), ("model", SVC(random_state=seed))]
    elif name == "logistic_regression":
        steps += [("scale", StandardScaler()), ("model", LogisticRegression(max_iter=5000))]
    elif name == "gradient_boosting":
        steps.append(("model", GradientBoostingClassifier(max_features="sqrt", random_state=seed)))
    else:
        raise ValueError(f"unknown model {name!r}; expected one of {', '.join(MODEL_NAMES)}")
    return Pipeline(steps)


class Constant(ClassifierMixin, BaseEstimator):
    """Predicts the one class it was trained on."""

    def fit(self, X: Any, y: Any) -> Constant:
        self.classes_ = np.unique(np.asarray(y))
        return self

    def predict(self, X: Any) -> np.ndarray:
        return np.full(len(X), self.classes_[0], dtype=object)

    def predict_proba(self, X: Any) -> np.ndarray:
        return np.ones((len(X), 1))


def fit(name: str, X: np.ndarray, y: np.ndarray, seed: int = 0) -> Any:
    """Model ``name`` fitted on (X, y), or :class:`Constant` when y has a single class."""
    if np.unique(y).size < 2:
        return Constant().fit(X, y)
    return make(name, seed).fit(X, y)


__all__ = ["MODEL_NAMES", "Constant", "fit", "make"]
