"""Phase-type distributions and the M/PH/1 queue (seed 002 §2.1–2.2, Wu's Kafka broker model).

A PH distribution (alpha, D) is the time to absorption of a continuous-time Markov chain with m
transient phases: ``alpha`` the initial probabilities (summing to 1), ``D`` the sub-generator
(negative diagonal, non-negative off-diagonal, rows summing to <= 0, at least one < 0). Then
f(x) = alpha e^{Dx} t with t = -D e, F(x) = 1 - alpha e^{Dx} e, E[X^n] = n! alpha (-D)^{-n} e.
Erlang, hyperexponential and hyper-Erlang (a mixture of Erlang branches, what Wu fits to the
brokers' service and end-to-end latency times) are special cases with constructors here.

The M/PH/1 queue (Poisson arrivals at rate lambda, one FCFS server with PH service) is a
quasi-birth-death process whose stationary vector is matrix-geometric: x_i = x_0 alpha M^i for
i >= 1 jobs, M = lambda (lambda I - lambda e alpha - D)^{-1}, x_0 = 1 - rho, so the mean number
in the system is E[N] = x_1 (I - M)^{-2} e and the mean response time E[N] / lambda (Little).
Its mean equals Pollaczek–Khinchine's for every PH service (the unit tests check it to 1e-9);
what the matrix form adds is the queue-length distribution, P(N = i) = x_i e.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.linalg import expm

from tierscope.errors import InputError, UnstableError
from tierscope.qn.queues import QueueMetrics

__all__ = ["PhaseType", "mph1", "read_phase_type"]


@dataclass(frozen=True, eq=False)
class PhaseType:
    """A phase-type distribution: initial vector ``alpha`` (m,), sub-generator ``D`` (m, m)."""

    alpha: np.ndarray
    D: np.ndarray

    def __post_init__(self) -> None:
        a = np.asarray(self.alpha, dtype=float).reshape(-1)
        d = np.asarray(self.D, dtype=float)
        m = a.size
        if m == 0 or d.shape != (m, m):
            raise InputError("D", list(d.shape), f"a {m}x{m} matrix (as many phases as alpha)")
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(d))):
            raise InputError("alpha/D", "non-finite", "finite numbers")
        if np.any(a < -1e-12) or abs(a.sum() - 1.0) > 1e-4:  # (published tables round)
            raise InputError("alpha", a.tolist(), "probabilities >= 0 summing to 1")
        off = d - np.diag(np.diag(d))
        if np.any(np.diag(d) >= 0) or np.any(off < -1e-12):
            raise InputError("D", d.tolist(), "diagonal < 0 and off-diagonal >= 0")
        exit_rates = -d.sum(axis=1)
        if np.any(exit_rates < -1e-9 * np.abs(np.diag(d))) or not np.any(exit_rates > 0):
            raise InputError("D", d.tolist(), "rows summing to <= 0, at least one < 0")
        try:
            np.linalg.solve(-d, np.ones(m))
        except np.linalg.LinAlgError:
            raise InputError("D", d.tolist(), "a non-singular sub-generator") from None
        object.__setattr__(self, "alpha", np.clip(a, 0.0, None) / np.clip(a, 0.0, None).sum())
        object.__setattr__(self, "D", d)

    # ---- constructors ----------------------------------------------------------------------
    @classmethod
    def exponential(cls, rate: float) -> PhaseType:
        return cls(np.array([1.0]), np.array([[-float(rate)]]))

    @classmethod
    def erlang(cls, phases: int, rate: float) -> PhaseType:
        """Sum of ``phases`` exponentials of ``rate`` each (mean phases / rate)."""
        return cls.hyper_erlang([(1.0, phases, rate)])

    @classmethod
    def hyperexponential(cls, probs: Sequence[float], rates: Sequence[float]) -> PhaseType:
        return cls.hyper_erlang([(p, 1, r) for p, r in zip(probs, rates, strict=True)])

    @classmethod
    def hyper_erlang(cls, branches: Sequence[tuple[float, int, float]]) -> PhaseType:
        """A mixture of Erlang branches, each (probability, phases, rate per phase): the
        block-diagonal form of Wu's eq. 3.18–3.22."""
        if not branches:
            raise InputError("branches", [], "at least one (probability, phases, rate)")
        sizes = [int(k) for _, k, _ in branches]
        if any(k < 1 for k in sizes):
            raise InputError("phases", sizes, "integers >= 1")
        m = sum(sizes)
        alpha, d = np.zeros(m), np.zeros((m, m))
        i = 0
        for (p, _, rate), size in zip(branches, sizes, strict=True):
            if not rate > 0:
                raise InputError("rate", rate, "> 0")
            alpha[i] = p
            for j in range(i, i + size):
                d[j, j] = -rate
                if j + 1 < i + size:
                    d[j, j + 1] = rate
            i += size
        return cls(alpha, d)

    # ---- properties ------------------------------------------------------------------------
    @property
    def phases(self) -> int:
        return int(self.alpha.size)

    @property
    def exit(self) -> np.ndarray:
        """Absorption rate from each phase, t = -D e."""
        return -self.D.sum(axis=1)

    def moment(self, n: int) -> float:
        """E[X^n] = n! alpha (-D)^{-n} e."""
        v = np.ones(self.phases)
        for _ in range(n):
            v = np.linalg.solve(-self.D, v)
        return float(math.factorial(n) * self.alpha @ v)

    @property
    def mean(self) -> float:
        return self.moment(1)

    @property
    def scv(self) -> float:
        """Squared coefficient of variation, Var / mean^2."""
        m1 = self.mean
        return self.moment(2) / (m1 * m1) - 1.0

    def sf(self, x: float | Sequence[float] | np.ndarray) -> np.ndarray:
        """P(X > x) = alpha e^{Dx} e."""
        xs = np.atleast_1d(np.asarray(x, dtype=float))
        return np.array([self.alpha @ expm(self.D * max(v, 0.0)) @ np.ones(self.phases)
                         for v in xs])  # fmt: skip

    def cdf(self, x: float | Sequence[float] | np.ndarray) -> np.ndarray:
        return 1.0 - self.sf(x)

    def pdf(self, x: float | Sequence[float] | np.ndarray) -> np.ndarray:
        xs = np.atleast_1d(np.asarray(x, dtype=float))
        t = self.exit
        return np.array([self.alpha @ expm(self.D * max(v, 0.0)) @ t for v in xs])

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws, by running the chain: the phase's holding time, then its next phase."""
        m = self.phases
        rates = -np.diag(self.D)
        # jump probabilities from each phase: to other phases, or (last column) absorption
        jumps = np.hstack([self.D + np.diag(rates), self.exit[:, None]]) / rates[:, None]
        cum = np.cumsum(jumps, axis=1)
        cum[:, -1] = 1.0
        out = np.zeros(n)
        phase = rng.choice(m, size=n, p=self.alpha)
        alive = np.arange(n)
        while alive.size:
            ph = phase[alive]
            out[alive] += rng.exponential(1.0 / rates[ph])
            u = rng.random(alive.size)
            nxt = (u[:, None] > cum[ph]).sum(axis=1)
            keep = nxt < m
            phase[alive[keep]] = nxt[keep]
            alive = alive[keep]
        return out

    # ---- files -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"alpha": self.alpha.tolist(), "D": self.D.tolist()}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], source: str = "PH") -> PhaseType:
        missing = [k for k in ("alpha", "D") if k not in doc]
        if missing:
            raise InputError(f"{source}: {missing[0]}", None, '{"alpha": [...], "D": [[...]]}')
        try:
            return cls(np.asarray(doc["alpha"], dtype=float), np.asarray(doc["D"], dtype=float))
        except (TypeError, ValueError) as exc:
            raise InputError(f"{source}: alpha/D", str(exc), "numbers") from None
        except InputError as exc:
            raise InputError(f"{source}: {exc.field}", exc.value, exc.expected) from None


def read_phase_type(path: str | Path) -> PhaseType:
    """A PH distribution from a JSON file ``{"alpha": [...], "D": [[...]]}``."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise InputError("--ph", str(p), "an existing JSON file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(str(p), type(exc).__name__, 'JSON {"alpha": [...], "D": [...]}') from None
    if not isinstance(doc, dict):
        raise InputError(str(p), type(doc).__name__, 'a JSON object {"alpha", "D"}')
    return PhaseType.from_dict(doc, str(p))


def mph1(arrival_rate: float, ph: PhaseType) -> QueueMetrics:
    """M/PH/1 FCFS by the matrix-geometric solution (Wu eq. 3.27–3.29, x_0 = 1 - rho).

    ``extra`` has ``queue_length`` (E[N], jobs in the system), the service's ``scv`` and
    ``p_empty``; the number in system is geometric in M: P(N = i) = x_0 alpha M^i e.
    """
    lam = float(arrival_rate)
    if not (math.isfinite(lam) and lam >= 0):
        raise InputError("--arrival-rate", arrival_rate, "a finite number >= 0")
    s = ph.mean
    rho = lam * s
    if rho >= 1.0:
        why = f"below 1 / E[S] = {1 / s:.6g} (utilization {rho:.4g} >= 1)"
        raise UnstableError("--arrival-rate", lam, why)
    m = ph.phases
    e, eye = np.ones(m), np.eye(m)
    if lam == 0:
        n_sys = 0.0
    else:
        M = lam * np.linalg.inv(lam * eye - lam * np.outer(e, ph.alpha) - ph.D)
        x1 = (1.0 - rho) * ph.alpha @ M
        iM = np.linalg.inv(eye - M)
        n_sys = float(x1 @ iM @ iM @ e)
    w = n_sys / lam if lam > 0 else s
    return QueueMetrics(
        kind="mph1",
        arrival_rate=lam,
        service_time=s,
        servers=1,
        utilization=rho,
        mean_number=n_sys,
        mean_queue=max(n_sys - rho, 0.0),
        response_time=w,
        waiting_time=max(w - s, 0.0),
        throughput=lam,
        p_wait=rho,
        p_block=0.0,
        extra={"queue_length": n_sys, "scv": ph.scv, "p_empty": 1.0 - rho},
    )
