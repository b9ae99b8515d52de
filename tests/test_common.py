"""Contracts every registered method keeps, checked on random models.

- Every method that returns a Solution satisfies Little's law, the forced-flow law and N = X(R+Z)
  to 1e-9.
- The exact methods (MVA, convolution, CTMC) agree with each other to 1e-8.
- Approximate MVA stays within a few percent of exact MVA; bounds bracket it.
- Every public package's __all__ names things that exist.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import net_from
from tierscope.qn import solvers
from tierscope.qn.network import Network
from tierscope.qn.result import Solution, consistency_errors


@st.composite
def closed_models(draw: st.DrawFn, max_pop: int = 4) -> Network:
    n_classes = draw(st.integers(1, 2))
    n_stations = draw(st.integers(1, 3))
    stations: list[dict[str, Any]] = []
    for k in range(n_stations):
        kind = draw(st.sampled_from(["single", "single", "multi", "rates", "delay"]))
        st_doc: dict[str, Any] = {"name": f"s{k}"}
        if kind == "multi":
            st_doc["servers"] = draw(st.integers(2, 3))
        elif kind == "rates":
            st_doc["rates"] = draw(st.lists(st.floats(0.5, 3.0), min_size=1, max_size=3))
        elif kind == "delay":
            st_doc["type"] = "delay"
        stations.append(st_doc)
    classes = []
    for c in range(n_classes):
        demands = {f"s{k}": draw(st.floats(0.05, 2.0)) for k in range(n_stations)}
        classes.append(
            {
                "name": f"c{c}",
                "population": draw(st.integers(1, max_pop)),
                "think_time": draw(st.sampled_from([0.0, 0.0, 1.5])),
                "demands": demands,
            }
        )
    return net_from({"stations": stations, "classes": classes})


EXACT = ("exact", "nc", "ctmc")
APPROX = ("amva", "linearizer")


@settings(max_examples=60, deadline=None)
@given(closed_models())
def test_every_method_keeps_the_operational_laws_and_agrees_with_exact(net: Network) -> None:
    ref = solvers.solve(net, "exact")
    assert isinstance(ref, Solution)
    for method in EXACT + APPROX:
        sol = solvers.solve(net, method)
        assert isinstance(sol, Solution)
        errs = consistency_errors(sol)
        assert max(errs.values()) < 1e-9, (method, errs)
        if method in EXACT:
            np.testing.assert_allclose(sol.throughput, ref.throughput, rtol=1e-8)
            np.testing.assert_allclose(
                sol.queue_length_ck, ref.queue_length_ck, rtol=1e-7, atol=1e-10
            )
        else:
            np.testing.assert_allclose(sol.throughput, ref.throughput, rtol=0.15)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.data())
def test_bounds_bracket_exact_for_n_1_to_50(n_stations: int, data: st.DataObject) -> None:
    demands = {f"s{k}": data.draw(st.floats(0.01, 1.0)) for k in range(n_stations)}
    Z = data.draw(st.sampled_from([0.0, 0.5, 5.0]))
    net = net_from(
        {
            "stations": [{"name": f"s{k}"} for k in range(n_stations)],
            "classes": [{"name": "c", "population": 1, "think_time": Z, "demands": demands}],
        }
    )
    for N in range(1, 51):
        n_net = net.with_population([N])
        exact = solvers.solve(n_net, "exact")
        b = solvers.solve(n_net, "bounds")
        d = b.to_dict()["classes"]["c"]
        x, r = float(exact.throughput[0]), float(exact.response_time[0])
        assert d["throughput"]["lower"] <= x * (1 + 1e-9) and x <= d["throughput"]["upper"] * (
            1 + 1e-9
        ), (N, d, x)
        assert d["response_time"]["lower"] <= r * (1 + 1e-9) and r <= d["response_time"][
            "upper"
        ] * (1 + 1e-9), (N, d, r)


def test_registry_names_match_cli() -> None:
    from tierscope.cli import METHOD_NAMES

    assert set(METHOD_NAMES) == {"auto", *solvers.METHODS}


def test_public_all_is_consistent() -> None:
    for name in ("tierscope", "tierscope.qn", "tierscope.spec", "tierscope.errors"):
        mod = importlib.import_module(name)
        for attr in getattr(mod, "__all__", []):
            assert hasattr(mod, attr), f"{name}.__all__ names missing {attr}"
