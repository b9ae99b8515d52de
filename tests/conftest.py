"""Shared fixtures: networks built from plain dicts, the way a model file would give them."""

from __future__ import annotations

from typing import Any

import pytest

from tierscope.qn.network import Network
from tierscope.spec import parse_model


def net_from(doc: dict[str, Any]) -> Network:
    return Network.from_model(parse_model(doc))


def bolch_8_3_network() -> Network:
    """Bolch et al., Queueing Networks and Markov Chains, Example 8.3."""
    names = ["cpu", "d1", "d2", "d3"]
    return net_from(
        {
            "stations": [{"name": n} for n in names],
            "classes": [
                {
                    "name": "jobs",
                    "population": 6,
                    "visits": dict(zip(names, [1, 0.4, 0.2, 0.1], strict=True)),
                    "service": dict(zip(names, [0.02, 0.2, 0.4, 0.6], strict=True)),
                }
            ],
        }
    )


def lazowska_two_class_network() -> Network:
    """Lazowska et al., Quantitative System Performance: two classes, one job each."""
    return net_from(
        {
            "stations": [{"name": "cpu"}, {"name": "disk"}],
            "classes": [
                {"name": "a", "population": 1, "demands": {"cpu": 1, "disk": 3}},
                {"name": "b", "population": 1, "demands": {"cpu": 2, "disk": 4}},
            ],
        }
    )


@pytest.fixture
def bolch_8_3() -> Network:
    return bolch_8_3_network()


@pytest.fixture
def jain_central_server() -> Network:
    """Jain, The Art of Computer Systems Performance Analysis: central-server model."""
    return net_from(
        {
            "stations": [{"name": "cpu"}, {"name": "disk_a"}, {"name": "disk_b"}],
            "classes": [
                {
                    "name": "users",
                    "population": 20,
                    "think_time": 4.0,
                    "visits": {"cpu": 16, "disk_a": 10, "disk_b": 5},
                    "service": {"cpu": 0.125, "disk_a": 0.3, "disk_b": 0.2},
                }
            ],
        }
    )


@pytest.fixture
def lazowska_two_class() -> Network:
    return lazowska_two_class_network()


#: Tests that run first: the load generator's sub-millisecond latency checks, while nothing
#: else has run yet. Real systems started and torn down before them (nginx and PostgreSQL in
#: tests/experiment, capped sweeps) disturbed them in full CI runs; alone they pass.
RUN_FIRST = ("tests/load/",)
#: Tests that run last, the real corpus last of all: scikit-learn in this process, and the
#: kernel's cgroup teardown after a corpus of capped sweeps, disturbed the same checks.
RUN_LAST = ("tests/learn/",)


#: Tests whose assertions depend on timing or on processes of this host (marker ``timing``, as is
#: every ``real_system`` test): each must pass 20 runs in a row beside a CPU hog before it lands
#: (``make soak``).
TIMING = (
    "tests/load/",
    "tests/experiment/",
    "tests/analysis/test_runner_truth.py",
    "tests/plan/test_real_system.py",
    "tests/learn/test_real_corpus.py",
    "tests/store/test_hostile_runs.py",
    "tests/test_examples.py::test_example_output_matches[load_coordinated_omission]",
    "tests/test_examples.py::test_example_output_matches[find_the_bottleneck]",
)


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    for item in items:
        if item.nodeid.startswith(TIMING) or item.get_closest_marker("real_system"):
            item.add_marker(pytest.mark.timing)
    first = [i for i in items if i.nodeid.startswith(RUN_FIRST)]
    last = [i for i in items if i.nodeid.startswith(RUN_LAST)]
    last.sort(key=lambda i: "test_real_corpus" in i.nodeid)  # stable: file order otherwise
    middle = [i for i in items if not i.nodeid.startswith(RUN_FIRST + RUN_LAST)]
    items[:] = first + middle + last
