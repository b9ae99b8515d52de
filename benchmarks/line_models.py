"""The benchmark models written for LINE (``line_solver``), and a command line to time LINE alone.

Design decision: a model is given once as a demand matrix D[class, station] plus a delay mask, in
tierscope's station order; this module writes the same network with LINE's public modelling API
(``Network``, ``ClosedClass``, ``Queue``/``Delay``, ``SolverMVA``) so that both tools solve the
identical model, and maps LINE's results back to tierscope's [class, station] layout.

Every closed class visits every station once (serial routing), so the visit ratios are 1 and
the service time per visit equals the demand; queues are single-server PS (BCMP, product form).

``python -m benchmarks.line_models amva MODEL.json METHOD`` solves a model with one LINE
approximate method and prints ``{"seconds": ..., "X": [...]}``; the benchmarks run it in a child
process so that a slow LINE method can be cut off after a fixed budget without disturbing the
timings of the parent.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np


def line_network(ls: ModuleType, D: np.ndarray, is_delay: np.ndarray, population: list[int]) -> Any:
    """The closed network (PS queues, delays) with demands ``D[c, k]`` as a LINE ``Network``."""
    C, M = D.shape
    model = ls.Network("tierscope-bench")
    nodes = [
        ls.Delay(model, f"s{k}") if is_delay[k] else ls.Queue(model, f"s{k}", ls.SchedStrategy.PS)
        for k in range(M)
    ]
    ref = nodes[int(np.flatnonzero(is_delay)[0])] if is_delay.any() else nodes[0]
    classes = [ls.ClosedClass(model, f"c{c}", int(population[c]), ref, 0) for c in range(C)]
    for c, jc in enumerate(classes):
        for k, node in enumerate(nodes):
            node.set_service(jc, ls.Exp(1.0 / float(D[c, k])))
    P = model.init_routing_matrix()
    for jc in classes:
        P[jc, jc] = ls.Network.serial_routing(nodes)
    model.link(P)
    return model


def line_solve(ls: ModuleType, model: Any, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Solve with ``SolverMVA(model, method=...)``: class throughputs [C], queue lengths [C, M]."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        solver = ls.SolverMVA(model, method=method, verbose=False)
        Q, _U, _R, _T, _A, _W = solver.getAvg()
        X = solver.getAvgSysTput()
    return np.asarray(X, dtype=float).ravel(), np.asarray(Q, dtype=float).T


def line_pfqn_mva(D: np.ndarray, is_delay: np.ndarray, population: list[int]) -> Any:
    """LINE's exact-MVA kernel ``pfqn_mva(L, N, Z)`` as SolverMVA calls it for this model: the
    queue demands as L [M_queues, C] and the delay demands summed into think times Z [C]."""
    from line_solver.api.pfqn.mva import pfqn_mva

    L = np.ascontiguousarray(D[:, ~is_delay].T)
    Z = D[:, is_delay].sum(axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pfqn_mva(L, np.asarray(population), Z)


def pfqn_to_tierscope(
    out: Any, D: np.ndarray, is_delay: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``pfqn_mva``'s (XN, CN, QN, ...) as throughputs [C] and queue lengths [C, M]."""
    X = np.asarray(out[0], dtype=float).ravel()
    Q = np.zeros_like(D)
    Q[:, ~is_delay] = np.asarray(out[2], dtype=float).T
    Q[:, is_delay] = X[:, None] * D[:, is_delay]
    return X, Q


def _amva_main(model_path: str, method: str) -> None:
    import line_solver as ls

    ls.GlobalConstants.set_verbose(ls.VerboseLevel.SILENT)
    spec = json.loads(Path(model_path).read_text(encoding="utf-8"))
    D = np.asarray(spec["D"], dtype=float)
    is_delay = np.asarray(spec["is_delay"], dtype=bool)
    model = line_network(ls, D, is_delay, spec["population"])
    t0 = time.perf_counter()
    X, _Q = line_solve(ls, model, method)
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "X": X.tolist()}))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "amva":
        sys.exit("usage: python -m benchmarks.line_models amva MODEL.json METHOD")
    _amva_main(sys.argv[2], sys.argv[3])
