"""Every estimator follows the contract: the constructor only stores, fit returns self and
validates, intervals and the JSON shape are the same for all; the auto choice says why."""

from __future__ import annotations

import importlib
import inspect

import numpy as np
import pytest

from tests.estimate._synthetic import exact_open_ps
from tierscope.errors import InputError
from tierscope.estimate import ESTIMATORS, METHOD_NAMES, Observations, choose_method, estimate


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_constructor_only_stores_keyword_parameters(name: str) -> None:
    cls = ESTIMATORS[name]
    assert cls.name == name and cls.summary
    params = inspect.signature(cls.__init__).parameters
    kinds = {p.kind for n, p in params.items() if n != "self"}
    assert kinds == {inspect.Parameter.KEYWORD_ONLY}
    est = cls()
    for n, p in params.items():
        if n != "self":
            assert getattr(est, n) == p.default  # stored as given, under its own name
    assert not [a for a in vars(est) if a.endswith("_")]  # nothing learned before fit


@pytest.mark.parametrize("name", ["ubr", "ubo", "mle"])
def test_fit_returns_self_and_the_documented_shape(name: str) -> None:
    rng = np.random.default_rng(1)
    obs = exact_open_ps(np.array([[0.02, 0.04]]), rng.uniform(1, 8, size=(15, 2)))
    est = ESTIMATORS[name](n_boot=10)
    assert est.fit(obs) is est
    doc = est.to_dict()
    assert doc["method"] == name
    assert set(doc["demands"]) == {"s0"} and set(doc["demands"]["s0"]) == {"c0", "c1"}
    lo, hi = doc["ci"]["s0"]["c0"]
    assert lo - 1e-12 <= doc["demands"]["s0"]["c0"] <= hi + 1e-12


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_bad_parameters_and_missing_data_are_input_errors(name: str) -> None:
    thin = Observations(
        classes=("a",), stations=("s",), throughput=np.ones((4, 1)), servers=np.ones(1)
    )
    with pytest.raises(InputError):
        ESTIMATORS[name](n_boot=-1).fit(thin)
    with pytest.raises(InputError):
        ESTIMATORS[name](n_boot=0).fit(thin)  # no utilisations, times, samples or records


def test_auto_explains_its_choice() -> None:
    rng = np.random.default_rng(2)
    obs = exact_open_ps(np.array([[0.02, 0.04]]), rng.uniform(1, 8, size=(15, 2)))
    method, why = choose_method(obs)
    assert method == "ubr" and "condition" in why
    est = estimate(obs, "auto", n_boot=0)
    assert est.notes_[0].startswith("auto chose 'ubr'")
    no_util = Observations(
        classes=obs.classes,
        stations=obs.stations,
        throughput=obs.throughput,
        servers=obs.servers,
        response_time=obs.response_time,
    )
    assert choose_method(no_util)[0] == "mle"
    with pytest.raises(InputError, match="--method"):
        estimate(obs, "magic")
    assert set(METHOD_NAMES) == {"auto", *ESTIMATORS}


def test_public_all_is_consistent() -> None:
    for name in ("tierscope.estimate", "tierscope.plan", "tierscope.domains.ntier"):
        mod = importlib.import_module(name)
        for attr in mod.__all__:
            assert hasattr(mod, attr), f"{name}.__all__ names missing {attr}"
