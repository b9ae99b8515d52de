"""Contracts every registered method keeps, checked on random models.

- Every method that returns a Solution satisfies Little's law, the forced-flow law and N = X(R+Z)
  to 1e-9.
- The exact methods (MVA, convolution, CTMC) agree with each other to 1e-8.
- Approximate MVA stays within its measured error of exact MVA.
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
            # rates that grow with the number present, as parallel hardware does
            st_doc["rates"] = sorted(draw(st.lists(st.floats(0.5, 3.0), min_size=1, max_size=3)))
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
#: worst relative throughput error seen on such models (tests/qn/test_amva.py has the details)
APPROX = {"amva": 0.35, "linearizer": 0.10}


@settings(max_examples=60, deadline=None)
@given(closed_models())
def test_every_method_keeps_the_operational_laws_and_agrees_with_exact(net: Network) -> None:
    ref = solvers.solve(net, "exact")
    assert isinstance(ref, Solution)
    for method in (*EXACT, *APPROX):
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
            np.testing.assert_allclose(sol.throughput, ref.throughput, rtol=APPROX[method])


def test_registry_names_match_cli() -> None:
    import typing

    from tierscope import cli

    hint = typing.get_type_hints(cli.model_solve, include_extras=True)["method"]
    help_text = next(m.help for m in hint.__metadata__ if getattr(m, "help", None))
    assert set(help_text.split(" | ")) == {"auto", *solvers.METHODS}


def test_public_all_is_consistent() -> None:
    for name in (
        "tierscope",
        "tierscope.load",
        "tierscope.qn",
        "tierscope.sim",
        "tierscope.spec",
        "tierscope.store",
        "tierscope.errors",
    ):
        mod = importlib.import_module(name)
        for attr in getattr(mod, "__all__", []):
            assert hasattr(mod, attr), f"{name}.__all__ names missing {attr}"
