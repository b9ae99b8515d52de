"""Wu's Kafka formulas (seed 002) against the thesis's published parameters and the digest's
derived values, and against first principles where the thesis gives none."""

from __future__ import annotations

import numpy as np
import pytest

from tests.qn.test_phase_type import WU_BS7
from tierscope.domains.kafka import (
    KAFKA_BATCH_HEADER,
    fit_send_interval,
    gilbert_elliott,
    kpi,
    packet_latency,
    producer_throughput,
    reactive_batch_size,
    storage_growth,
    timely_throughput,
    violation_rate,
)
from tierscope.errors import InputError
from tierscope.qn.phase_type import PhaseType
from tierscope.qn.queues import mg1


def test_stage_one_gamma_violation_rate_is_the_thesis_fit() -> None:
    """Eq. 6.4 with a = 36.0582, b = 2.35251 (ms): P(L > 100 ms) = 0.1421."""
    assert violation_rate(100, gamma=(36.0582, 2.35251)) == pytest.approx(0.1421, abs=5e-5)


def test_stage_two_ph_violation_rate_is_wus_hyper_erlang() -> None:
    ph = PhaseType.hyper_erlang(WU_BS7)
    assert violation_rate(350, ph=ph) == pytest.approx(0.628, abs=6e-4)


def test_stage_three_uniform_violation_rate() -> None:
    """Eq. 6.6 with L_sync in [45, 75] ms and B_T = 1000 ms: L_min 45, L_max 1075, α 0.9."""
    rates = [violation_rate(z, uniform=(45, 75 + 1000)) for z in (200, 350, 500, 700)]
    np.testing.assert_allclose(rates, [0.832, 0.669, 0.507, 0.290], atol=6e-4)
    assert violation_rate(2000, uniform=(45, 1075)) == 0.0
    with pytest.raises(InputError):
        violation_rate(1, gamma=(1, 1), uniform=(0, 1))


def test_reactive_batching_takes_the_largest_timely_throughput() -> None:
    candidates = {1: (1000.0, 0.0, 0.1), 5: (4000.0, 0.5, 0.1), 10: (6000.0, 0.9, 0.1)}
    best, chi = reactive_batch_size(candidates)
    assert best == 5 and chi == pytest.approx(timely_throughput(4000, 0.5, 0.1)) == 1800


def test_producer_throughput_from_packets() -> None:
    """One broker with 3 leader partitions, 10 messages of 100 B per batch: a packet holds
    3 (1000 + 61) B + 50 B of headers; with a 2 ms send interval, 500 packets/s carry
    15 000 messages/s, and the payload is 1.5 MB of the 1.6165 MB sent."""
    out = producer_throughput(100, 10, [3], lambda s: np.full_like(s, 0.002), packet_header=50)
    size = 3 * (1000 + KAFKA_BATCH_HEADER) + 50
    assert out.packet_bytes[0] == size and out.packets_per_s[0] == pytest.approx(500)
    assert out.messages_per_s == pytest.approx(15_000)
    assert out.relative_payload == pytest.approx(1.5e6 / (500 * size))
    # a broker without leaders sends nothing
    two = producer_throughput(100, 10, [3, 0], lambda s: np.full_like(s, 0.002))
    assert two.packets_per_s[1] == 0 and two.messages_per_s == pytest.approx(15_000)


def test_send_interval_fit_recovers_a_line() -> None:
    sizes = np.array([200.0, 800, 1600, 3200, 6400])
    fit = fit_send_interval(sizes, 0.0004 + 2e-7 * sizes)
    assert fit.intercept == pytest.approx(0.0004) and fit.slope == pytest.approx(2e-7)
    assert fit.r2 == pytest.approx(1.0)
    with pytest.raises(InputError):
        fit_send_interval([1.0, 1.0], [2.0, 3.0])


def test_storage_counts_the_index_and_the_replicas() -> None:
    one_day = storage_growth([20e6], 86_400, index_interval_bytes=4096)
    assert one_day[0] == pytest.approx((1 + 8 / 4096) * 86_400 * 20e6)
    three = storage_growth([10e6, 10e6, 10e6], 100, replication=3, index_interval_bytes=4096)
    np.testing.assert_allclose(three, 3 * (1 + 8 / 4096) * 100 * 10e6)  # every broker has all
    with pytest.raises(InputError):
        storage_growth([1.0], 1, replication=2)


def test_packet_latency_sums_the_request_streams() -> None:
    ph = PhaseType.erlang(2, 2000.0)  # 1 ms services
    rates = {"produce": 300.0, "replica": 200.0, "fetch": 100.0}
    each = {k: mg1(v, ph.mean, ph.scv).response_time for k, v in rates.items()}
    services = dict.fromkeys(rates, ph)
    assert packet_latency(rates, services, synchronous=True) == pytest.approx(sum(each.values()))
    assert packet_latency(rates, services, synchronous=False) == pytest.approx(
        each["produce"] + each["fetch"]
    )


def test_kpi_and_gilbert_elliott() -> None:
    assert kpi(0.5, 0.8, 0.1, 0.0) == pytest.approx(0.3 * 0.5 + 0.3 * 0.8 + 0.3 * 0.9 + 0.1)
    with pytest.raises(InputError):
        kpi(1, 1, 0, 0, weights=(0.5, 0.5, 0.5, 0.5))
    # the dynamic-configuration trace's stage 0: p 1 %, r 10 %, 1-h 70 %, 1-k 0.1 % -> 6.45 %
    ge = gilbert_elliott(0.01, 0.10, h=0.30, k=0.999)
    assert ge["loss"] == pytest.approx(0.0645, abs=5e-5) and ge["mean_bad_burst"] == 10
    assert gilbert_elliott(0.02, 0.10, h=0.30, k=0.999)["loss"] == pytest.approx(0.1175, abs=5e-5)
