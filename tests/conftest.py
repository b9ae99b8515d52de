"""Shared fixtures: networks built from plain dicts, the way a model file would give them."""

from __future__ import annotations

from typing import Any

import pytest

from tierscope.qn.network import Network
from tierscope.spec import parse_model


def net_from(doc: dict[str, Any]) -> Network:
    return Network.from_model(parse_model(doc))


@pytest.fixture
def bolch_8_3() -> Network:
    """Bolch et al., Queueing Networks and Markov Chains, Example 8.3."""
    return net_from(
        {
            "stations": [{"name": n} for n in ("s1", "s2", "s3", "s4")],
            "classes": [
                {
                    "name": "jobs",
                    "population": 6,
                    "visits": {"s1": 1, "s2": 0.4, "s3": 0.2, "s4": 0.1},
                    "service": {"s1": 0.02, "s2": 0.2, "s3": 0.4, "s4": 0.6},
                }
            ],
        }
    )


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
