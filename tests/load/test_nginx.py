"""Against a real server (nginx): keep-alive, HEAD, 404s and connection policies.

Marked ``real_system``: needs ``nginx`` (``apt-get install -y nginx-light``).
"""

from __future__ import annotations

import pytest

from tests.load.conftest import workload
from tierscope.load import LoadGenerator

pytestmark = pytest.mark.real_system


def test_keep_alive_closed_loop(nginx: str) -> None:
    w = workload(interactions=[{"name": "index", "url": "/index.html"}])
    result = LoadGenerator(w, [nginx]).start(8, 0, 1.0).wait()
    s = result.summary
    assert s["errors"] == 0 and s["throughput"] > 500
    # One kept-alive connection per user, renewed when nginx closes it after its default
    # keepalive_requests (1000), announced with "Connection: close": no error, no retry.
    assert s["totals"]["connects"] <= 8 + s["totals"]["sent"] // 1000 + 8
    assert s["totals"]["retries"] == 0
    assert (result.requests["status"] == "ok").all()
    assert (result.requests["http_status"] == 200).all()
    # The whole response every time (the last one on a connection says "close", not
    # "keep-alive", hence a few bytes less).
    sizes = result.requests["bytes"]
    assert sizes.min() > 612 and sizes.max() - sizes.min() <= 5


def test_head_404_and_mixed_interactions(nginx: str) -> None:
    w = workload(
        interactions=[
            {"name": "index", "url": "/index.html"},
            {"name": "head", "method": "HEAD", "url": "/index.html"},
            {"name": "missing", "url": "/nope-{int:1:9}"},
        ]
    )
    result = LoadGenerator(w, [nginx]).start(6, 0, 1.0).wait()
    by = result.summary["interactions"]
    assert by["index"]["errors"] == 0 and by["head"]["errors"] == 0
    assert by["missing"]["errors"] == by["missing"]["requests"] > 0
    assert result.summary["errors_by_class"] == {"http": by["missing"]["errors"]}
    heads = result.requests.filter(result.requests["interaction"] == "head")
    assert heads["bytes"].max() < 612  # a HEAD response has no body


@pytest.mark.parametrize("policy", ["per-request", "per-session"])
def test_connection_policies(nginx: str, policy: str) -> None:
    w = workload(
        connection=policy,
        interactions=[{"name": "index", "url": "/index.html"}],
        mixes={"m": {"end_probability": 0.5}},
    )
    result = LoadGenerator(w, [nginx]).start(4, 0, 0.5).wait()
    s = result.summary
    assert s["errors"] == 0
    sent = s["totals"]["sent"]
    if policy == "per-request":
        assert s["totals"]["connects"] == sent
    else:  # sessions of two requests on average
        assert sent / 3 < s["totals"]["connects"] < sent / 1.5


def test_shared_connections(nginx: str) -> None:
    w = workload(interactions=[{"name": "index", "url": "/index.html"}], think_time=0.01)
    result = LoadGenerator(w, [nginx], connections=4).start(40, 0, 1.0).wait()
    s = result.summary
    assert s["errors"] == 0
    assert s["totals"]["max_connections"] <= 4
