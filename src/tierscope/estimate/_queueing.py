"""Open processor-sharing formulas the regression and likelihood methods share."""

from __future__ import annotations

import numpy as np

#: Utilisations are clipped below this before 1/(1-U) terms.
U_MAX = 0.995


def erlang_c(m: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Probability of waiting in M/M/m with offered load a = m U (Erlang-B recursion)."""
    m = np.maximum(np.rint(np.asarray(m, dtype=float)), 1).astype(int)
    a = np.asarray(a, dtype=float)
    m, a = np.broadcast_arrays(m, a)
    b = np.ones(a.shape)
    out = np.empty(a.shape)
    for k in range(1, int(m.max()) + 1):
        b = a * b / (k + a * b)
        done = m == k
        out[done] = b[done]
    u = np.minimum(a / m, U_MAX)
    return out / (1 - u * (1 - out))


def ps_factor(u: np.ndarray, m: np.ndarray) -> np.ndarray:
    """R / D of a job at an M/M/m-PS station with per-server utilisation u.

    The number of jobs in M/M/m-PS follows the same birth-death chain as in M/M/m-FCFS, so
    R = D (1 + C(m, m u) / (m (1 - u))); for m = 1 this is the familiar D / (1 - u).
    """
    u = np.minimum(np.asarray(u, dtype=float), U_MAX)
    m = np.maximum(np.rint(np.asarray(m, dtype=float)), 1)
    return 1 + erlang_c(m, m * u) / (m * (1 - u))
