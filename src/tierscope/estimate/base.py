"""The contract every demand estimator follows, and bootstrap confidence intervals.

Design decision (scikit-learn's estimator contract): the constructor only stores keyword
parameters; ``fit(data)`` validates them and the data, estimates the demand matrix
``demands_[station, class]`` (seconds of one server per request: for a run folder, CPU seconds)
and, unless ``n_boot=0``, bootstrap intervals ``ci_low_``/``ci_high_``. A subclass implements
only ``_estimate`` (and ``_resample`` if its unit of resampling is not the observation window),
so every method gets the same intervals, the same checks and the same JSON shape.

Bootstrap: windows are resampled in moving blocks (length ⌈W^(1/3)⌉), which keeps the
correlation of neighbouring windows; the interval is the percentile interval of the
re-estimates at ``confidence``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Self

import numpy as np

from tierscope.errors import InputError
from tierscope.estimate._data import Observations, demands_doc


class Estimator:
    """Base class: ``Method(**params).fit(observations)`` -> ``demands_``, ``ci_low_``, ..."""

    #: The name the CLI and the registry use.
    name: ClassVar[str] = ""
    #: What the method needs, in the words of :meth:`Observations.available`.
    needs: ClassVar[tuple[str, ...]] = ()
    #: One line on what the method does (shown by ``auto`` and in the output).
    summary: ClassVar[str] = ""
    #: Resamples for the intervals when ``n_boot`` is not given.
    default_boot: ClassVar[int] = 200

    def __init__(
        self, *, n_boot: int | None = None, confidence: float = 0.95, seed: int = 1
    ) -> None:
        self.n_boot = n_boot
        self.confidence = confidence
        self.seed = seed

    # ---- the contract ------------------------------------------------------------------------
    def fit(self, data: Observations) -> Self:
        self._check_params()
        self._check_data(data)
        self.stations_ = data.stations
        self.classes_ = data.classes
        self.unit_ = data.unit
        self.notes_: list[str] = list(data.notes)
        self.demands_ = np.asarray(self._estimate(data), dtype=float)
        self.n_boot_ = self.default_boot if self.n_boot is None else self.n_boot
        self.ci_low_: np.ndarray | None = None
        self.ci_high_: np.ndarray | None = None
        if self.n_boot_ > 0:
            self._bootstrap(data)
        return self

    def _estimate(self, data: Observations) -> np.ndarray:
        """The [station, class] demand matrix from ``data``."""
        raise NotImplementedError

    def _resample(self, data: Observations, rng: np.random.Generator) -> Observations:
        """A bootstrap replicate of ``data`` (moving blocks of windows)."""
        return data.rows(block_indices(data.n_windows, rng))

    # ---- checks ------------------------------------------------------------------------------
    def _check_params(self) -> None:
        n = self.n_boot
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise InputError("n_boot", n, "an integer >= 0 (0: no intervals)")
        if not (isinstance(self.confidence, float | int) and 0.5 <= self.confidence < 1):
            raise InputError("confidence", self.confidence, "a level in [0.5, 1)")

    def _check_data(self, data: Observations) -> None:
        have = set(data.available())
        missing = [n for n in self.needs if n not in have]
        if missing:
            raise InputError(
                "method",
                self.name,
                f"data with {', '.join(missing)} ({_WHERE[missing[0]]}); this input has "
                + ", ".join(sorted(have)),
                source=data.source,
            )

    # ---- intervals ---------------------------------------------------------------------------
    def _bootstrap(self, data: Observations) -> None:
        rng = np.random.default_rng(self.seed)
        draws = []
        for _ in range(self.n_boot_):
            try:
                draws.append(self._estimate(self._resample(data, rng)))
            except (InputError, ValueError, np.linalg.LinAlgError):
                continue  # a degenerate replicate (e.g. all windows alike) says nothing
        if len(draws) < max(2, self.n_boot_ // 2):
            self.notes_.append("bootstrap failed on most replicates: no intervals")
            return
        stack = np.stack(draws)
        alpha = (1 - self.confidence) / 2
        self.ci_low_ = np.quantile(stack, alpha, axis=0)
        self.ci_high_ = np.quantile(stack, 1 - alpha, axis=0)

    # ---- output ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "method": self.name,
            "unit": self.unit_,
            "demands": demands_doc(self.stations_, self.classes_, self.demands_),
        }
        if self.ci_low_ is not None and self.ci_high_ is not None:
            lo, hi = self.ci_low_, self.ci_high_
            doc["ci"] = {
                st: {cl: [float(lo[k, c]), float(hi[k, c])] for c, cl in enumerate(self.classes_)}
                for k, st in enumerate(self.stations_)
            }
            doc["confidence"] = self.confidence
            doc["bootstrap"] = self.n_boot_
        else:
            doc["ci"] = {}
        if self.notes_:
            doc["notes"] = list(self.notes_)
        return doc


_WHERE = {
    "utilization": "columns u_<station>",
    "response_time": "columns r_<class>",
    "queue": "columns n_<station>_<class>",
    "population": "columns pop_<class>",
    "records": "per-request records: give a run folder",
    "throughput": "columns x_<class>",
}


def block_indices(n: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of a moving-block bootstrap replicate of ``n`` items."""
    if n <= 1:
        return np.zeros(n, dtype=np.int64)
    b = max(1, math.ceil(n ** (1 / 3)))
    starts = rng.integers(0, n - b + 1, size=math.ceil(n / b))
    return (starts[:, None] + np.arange(b)[None, :]).ravel()[:n]


__all__ = ["Estimator", "block_indices"]
