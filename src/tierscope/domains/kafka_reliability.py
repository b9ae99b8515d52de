"""Message loss and duplication of a Kafka producer, predicted from its settings and the
network (seed 002 §2.7–2.9), and Wu's dynamic configuration (Algorithm 1).

Rows are what a reliability experiment measures per configuration and network condition
(`tierscope kafka reliability --json`'s rows): the producer's settings, the network's delay
and loss, and the loss and duplicate rates counted over every message. The predictor learns
P_l and P_d from the eight features of eq. 5.1 (message size, timeliness, delay, loss, acks,
batch size, poll interval, timeout; those a data set lacks are left out), with gradient
boosting by default or the thesis's network (four hidden layers of 200, 200, 200 and 64) on
standardised inputs (the thesis fed raw values). It is judged as the thesis could not be:
cross-validated on *configurations never seen* (folds grouped by the producer settings)
against a constant baseline.

Dynamic configuration (Algorithm 1, L1091–L1111): for the network as it is now, while the KPI
γ (eq. 5.2) is below the user's target, step each parameter in turn (acks, batch size,
timeout, poll interval) to its neighbouring value in the direction that raises the predicted
γ, and keep the step if it does; stop when γ meets the target or no step raises it. The
aggregate loss and duplicate rates of a run whose conditions change are eq. 5.3.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tierscope.domains.kafka import kpi
from tierscope.errors import InputError

__all__ = [
    "FEATURES",
    "KPI_TARGETS",
    "ReliabilityModel",
    "aggregate_rates",
    "cross_validate",
    "dynamic_configuration",
    "fit_reliability",
    "read_rows",
]

#: eq. 5.1's inputs, by their names in the reliability rows
FEATURES = ("message_size", "timeliness_ms", "delay_ms", "loss", "acks", "batch_messages",
            "poll_ms", "timeout_ms")  # fmt: skip
#: the producer's settings: what a configuration is (network conditions are not)
SETTINGS = ("acks", "batch_messages", "timeout_ms", "poll_ms", "message_size")
TARGETS = ("loss_rate", "duplicate_rate")
#: what else a row may say and the predictor then learns too: the KPI's relative payload φ and
#: normalised service rate μ, the late share η_v and the acknowledged-but-lost share η_l
KPI_TARGETS = ("relative_payload", "service_ratio", "late_rate", "acked_lost_rate")
METHODS = ("gbm", "mlp")


def _acks(value: Any) -> float:
    """acks as a number that grows with the guarantee: 0, 1, all -> 0, 1, 2."""
    text = str(value).strip().lower()
    if text in ("all", "-1"):
        return 2.0
    if text in ("0", "1", "0.0", "1.0"):
        return float(text[0])
    raise InputError("acks", value, "0, 1 or all")


def _matrix(rows: pl.DataFrame, features: Sequence[str]) -> np.ndarray:
    cols = []
    for f in features:
        if f == "acks":
            cols.append(np.array([_acks(v) for v in rows["acks"].to_list()]))
        else:
            cols.append(rows[f].cast(pl.Float64).to_numpy())
    return np.column_stack(cols)


#: the thesis's network: four hidden layers
THESIS_LAYERS = (200, 200, 200, 64)


def _estimator(method: str, seed: int, layers: tuple[int, ...] = THESIS_LAYERS) -> Any:
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if method == "gbm":
        return GradientBoostingRegressor(
            n_estimators=300, max_depth=3, learning_rate=0.05, random_state=seed
        )
    if method == "mlp":
        net = MLPRegressor(hidden_layer_sizes=layers, activation="tanh", max_iter=2000,
                           random_state=seed)  # fmt: skip
        # inputs and the rate both standardised (a duplicate rate of 0.1 % is noise otherwise)
        return TransformedTargetRegressor(make_pipeline(StandardScaler(), net),
                                          transformer=StandardScaler())  # fmt: skip
    raise InputError("method", method, "one of " + ", ".join(METHODS))


@dataclass
class ReliabilityModel:
    """Predicts (P_l, P_d) for rows of settings and network conditions."""

    method: str
    features: tuple[str, ...]
    models: dict[str, Any] = field(default_factory=dict)
    constants: dict[str, float] = field(default_factory=dict)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(t for t in (*TARGETS, *KPI_TARGETS) if t in self.models or t in self.constants)

    def predict(self, rows: pl.DataFrame) -> dict[str, np.ndarray]:
        x = _matrix(rows, self.features)
        out = {}
        for target in self.targets:
            if target in self.models:
                out[target] = np.clip(self.models[target].predict(x), 0.0, 1.0)
            else:  # a rate that never varied in the data
                out[target] = np.full(len(rows), self.constants.get(target, 0.0))
        return out


def read_rows(path: str | os.PathLike[str]) -> pl.DataFrame:
    """Reliability rows from ``kafka reliability --json``'s document (``{"rows": [...]}``) or a
    CSV with a header; a poll interval never set (null) reads as 0 (no poll before a message)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError("ROWS", str(p), f"a readable file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise InputError("ROWS", str(p), "a UTF-8 JSON or CSV file") from None
    if p.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InputError("ROWS", str(p), f"valid JSON ({exc})") from None
        rows = doc.get("rows") if isinstance(doc, dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise InputError("ROWS", str(p), 'a document {"rows": [{...}, ...]}')
        flat = [{k: v for k, v in r.items() if not isinstance(v, dict | list)} for r in rows]
        frame = pl.DataFrame(flat, infer_schema_length=None) if flat else pl.DataFrame()
    else:
        try:
            frame = pl.read_csv(io.StringIO(text), infer_schema_length=None)
        except pl.exceptions.PolarsError as exc:
            raise InputError("ROWS", str(p), f"a CSV file with a header ({exc})") from None
    if "acks" in frame.columns:
        frame = frame.with_columns(pl.col("acks").cast(pl.String))
    if "poll_ms" in frame.columns:
        frame = frame.with_columns(pl.col("poll_ms").cast(pl.Float64).fill_null(0.0))
    return frame.drop_nulls([t for t in TARGETS if t in frame.columns])  # nothing sent


#: rows a KPI term needs to be learned (it is undefined where nothing was acknowledged)
MIN_ROWS = 10


def _targets(rows: pl.DataFrame) -> tuple[str, ...]:
    """The rates to learn: loss and duplication, and the KPI's terms that at least
    :data:`MIN_ROWS` rows give."""
    extra = [t for t in KPI_TARGETS
             if t in rows.columns and rows.height - rows[t].null_count() >= MIN_ROWS]  # fmt: skip
    return (*TARGETS, *extra)


def _check(rows: pl.DataFrame) -> tuple[str, ...]:
    missing = [c for c in (*TARGETS, "loss", "delay_ms", "acks") if c not in rows.columns]
    if missing:
        raise InputError("rows", missing[0], "reliability rows with " + ", ".join(TARGETS))
    if rows.height < MIN_ROWS:
        raise InputError("rows", rows.height, f"at least {MIN_ROWS} measured configurations")
    return tuple(f for f in FEATURES if f in rows.columns)


def fit_reliability(
    rows: pl.DataFrame, method: str = "gbm", seed: int = 1, layers: tuple[int, ...] = THESIS_LAYERS
) -> ReliabilityModel:
    """A predictor of the loss and duplicate rates, and of the KPI's terms the rows give, fitted
    to every row that has the target (``layers``: the hidden layers of the ``mlp``)."""
    features = _check(rows)
    model = ReliabilityModel(method, features)
    x = _matrix(rows, features)
    for target in _targets(rows):
        y = rows[target].cast(pl.Float64).to_numpy()
        given = ~np.isnan(y)
        if given.sum() < MIN_ROWS:  # too few in this training set (a fold)
            continue
        x_t, y = x[given], y[given]
        if np.ptp(y) == 0:
            model.constants[target] = float(y[0])
            continue
        model.models[target] = _estimator(method, seed, layers).fit(x_t, y)
    return model


def cross_validate(
    rows: pl.DataFrame,
    method: str = "gbm",
    folds: int = 5,
    seed: int = 1,
    layers: tuple[int, ...] = THESIS_LAYERS,
) -> dict[str, Any]:
    """Mean absolute errors of the predictor on configurations left out of its training (folds
    grouped by the producer settings), beside the constant baseline's (the training mean)."""
    from sklearn.model_selection import GroupKFold

    features = _check(rows)
    keys = [c for c in SETTINGS if c in rows.columns]
    groups = rows.select(pl.concat_str([pl.col(c).cast(pl.String) for c in keys],
                                       separator="|")).to_series().to_numpy()  # fmt: skip
    n_groups = len(set(groups))
    if n_groups < 2:
        raise InputError("rows", n_groups, "two or more producer configurations")
    k = min(folds, n_groups)
    targets = _targets(rows)
    errors: dict[str, list[float]] = {f"{t}_{w}": [] for t in targets for w in ("mae", "baseline")}
    x = np.arange(rows.height)
    for train, test in GroupKFold(n_splits=k).split(x, groups=groups):
        tr, te = rows[train.tolist()], rows[test.tolist()]
        got = fit_reliability(tr, method, seed, layers).predict(te)
        for target in targets:
            y = te[target].cast(pl.Float64).to_numpy()
            given = ~np.isnan(y)
            base = float(tr[target].cast(pl.Float64).mean())  # type: ignore[arg-type]
            if target not in got or not given.any():
                continue
            errors[f"{target}_mae"].extend(np.abs(got[target][given] - y[given]).tolist())
            errors[f"{target}_baseline"].extend(np.abs(base - y[given]).tolist())
    out: dict[str, Any] = {k: float(np.mean(v)) for k, v in errors.items() if v}
    out |= {"method": method, "folds": k, "configurations": n_groups, "rows": rows.height,
            "features": list(features)}  # fmt: skip
    return out


def aggregate_rates(
    times: Sequence[float], rate: Sequence[float], p_l: Sequence[float], p_d: Sequence[float]
) -> dict[str, float]:
    """Eq. 5.3: R = ∫λ(t)P(t)dt / ∫λ(t)dt over a run whose message rate λ and predicted P_l,
    P_d change (piecewise linear between the sample ``times``)."""
    t = np.asarray(times, dtype=float)
    lam = np.asarray(rate, dtype=float)
    if t.size < 2 or np.any(np.diff(t) <= 0):
        raise InputError("times", t.tolist(), "two or more increasing times")
    total = np.trapezoid(lam, t)
    return {
        "loss": float(np.trapezoid(lam * np.asarray(p_l, dtype=float), t) / total),
        "duplication": float(np.trapezoid(lam * np.asarray(p_d, dtype=float), t) / total),
    }


#: what the KPI needs for a configuration: (bandwidth use φ, service rate μ, P_l, P_d)
Predictor = Callable[[Mapping[str, Any]], tuple[float, float, float, float]]


@dataclass(frozen=True)
class Step:
    parameter: str
    value: Any
    gamma: float


def dynamic_configuration(
    config: Mapping[str, Any],
    candidates: Mapping[str, Sequence[Any]],
    predict: Predictor,
    target: float,
    weights: Sequence[float] = (0.3, 0.3, 0.3, 0.1),
    order: Sequence[str] = ("acks", "batch_messages", "timeout_ms", "poll_ms"),
) -> tuple[dict[str, Any], list[Step]]:
    """Algorithm 1: from ``config``, step the parameters in ``order`` through their ordered
    ``candidates`` (to a neighbouring value, the way that raises the predicted γ) while γ is
    below ``target``. Returns the configuration reached and the steps taken (γ after each)."""
    current = dict(config)
    for p in order:
        if p in candidates and current.get(p) not in list(candidates[p]):
            raise InputError(f"config.{p}", current.get(p), f"one of {list(candidates[p])}")
    gamma = kpi(*predict(current), weights=weights)
    steps: list[Step] = []
    for p in order:
        if p not in candidates:
            continue
        values = list(candidates[p])
        while gamma < target:
            i = values.index(current[p])
            best: tuple[float, Any] | None = None
            for j in (i - 1, i + 1):
                if 0 <= j < len(values):
                    trial = current | {p: values[j]}
                    g = kpi(*predict(trial), weights=weights)
                    if g > gamma and (best is None or g > best[0]):
                        best = (g, values[j])
            if best is None:
                break
            gamma, current[p] = best
            steps.append(Step(p, best[1], gamma))
    return current, steps
