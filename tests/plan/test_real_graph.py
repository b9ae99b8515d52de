"""Models of a call graph from measurements (issue 16's acceptance): examples/graph.yaml, its
payment component capped at a tenth of a core, swept for real; ``calibrate`` builds the model
from the graph (each component's demand per request from its visits, the requests that skip
orders' branch included), names payment, and predicts the peak and the curve below it; the
what-if of payment's quota doubled is measured beside it, level by level on one deployment.

As in test_real_system.py, each level is measured once for 8 s beside other work, so the
bounds are those a short sweep on a busy machine can hold (peak within 15 %, the median factor
between predicted and measured mean response times below 90 % of the peak within 1.45); the
issue's 10 % / 15 % targets are for dense, repeated sweeps on a quiet machine (``make bench``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.plan._real import (
    calibration_summary,
    measure,
    prerequisites,
    report,
    whatif_summary,
    with_whatif,
)
from tests.plan.test_real_system import PHASES, _check

pytestmark = [pytest.mark.real_system, pytest.mark.timing, pytest.mark.timeout(1200)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "graph.yaml"
#: payment (0.1 core, 4 ms per visit, 80 % of the requests) saturates near 25 / 0.8 = 31/s,
#: about 17 users; doubled, near 62/s and 34 users
LEVELS = [3, 6, 10, 14, 18, 26]
WHATIF_LEVELS = [6, 12, 20, 28, 36, 50]
WHATIF = "payment-0.2"


@pytest.fixture(scope="module")
def shop_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prerequisites()
    doc: dict[str, Any] = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    doc.update(sweep={"levels": LEVELS, "repetitions": 1}, phases=PHASES, faults=[])
    doc = with_whatif(doc, WHATIF_LEVELS, 1, ("system.components.payment.cpu", 0.2), WHATIF)
    return measure(tmp_path_factory.mktemp("real") / "shop", doc)


def test_calibrated_graph_model_names_payment_and_predicts_the_sweep(shop_run: Path) -> None:
    cal, summary = calibration_summary(shop_run, "base")
    report("calibration of the shop graph, payment bottleneck", summary)
    assert cal.model.bottleneck() == "payment"
    # visits skipped count: payment's demand per request is about 0.8 of a visit's 4 ms
    assert 0.6 * 0.004 < cal.model.tier("payment").total_demand < 1.2 * 0.004
    _check(summary)


def test_whatif_payment_quota_doubled_agrees_with_the_changed_graph(shop_run: Path) -> None:
    model, result, summary = whatif_summary(shop_run, WHATIF_LEVELS, "payment.cpu=0.2", WHATIF)
    report("what-if payment.cpu=0.2 vs the real run", summary)
    assert result.changed.max_throughput > 1.6 * model.max_throughput
    _check(summary)
