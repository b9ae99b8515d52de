"""Wu's performance and timeliness models of a Kafka producer and its brokers (seed 002 §2.3–2.10).

Throughput (Ch. 4): the producer packs, per broker, one batch per leader partition into one
packet, S_r = S_b P + h_p (eq. 4.1, S_b = (S_m N_b + h_b) / c); the send interval per broker is
a function of the packet size fitted from measurements (linear, R² ≈ 0.99 in the thesis:
:func:`fit_send_interval`), and packets/s, bytes/s, messages/s and the relative payload follow
(§2.3). Storage (eq. 4.2) adds the offset index, and here the replication the thesis leaves out.
Latency: each broker's request streams are M/PH/1 queues (:func:`tierscope.qn.phase_type.mph1`),
summed with or without the replica fetch (synchronous or asynchronous replication, §2.6).

Timeliness (Ch. 6): the share of messages later than a deadline ζ, η_v = P(L > ζ), from the
end-to-end latency distribution fitted per batch size — Gamma (B_S = 1), phase-type (batches
bound by size) or uniform between L_min and α L_max (batches bound by linger) — and the timely
throughput χ' = (1 − η_v)(1 − η_l) χ that reactive batching maximises over the batch sizes.
The KPI γ = ω₁φ + ω₂μ + ω₃(1 − P_l) + ω₄(1 − P_d) is eq. 5.2, and a Gilbert–Elliott loss
process's stationary loss rate and burst length are what the network emulator is checked with.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from tierscope.errors import InputError
from tierscope.qn.phase_type import PhaseType, mph1

__all__ = [
    "KAFKA_BATCH_HEADER",
    "PACKINGS",
    "ProducerThroughput",
    "SendInterval",
    "ThroughputModel",
    "fit_send_interval",
    "fit_throughput",
    "gilbert_elliott",
    "kpi",
    "packet_latency",
    "producer_throughput",
    "reactive_batch_size",
    "storage_growth",
    "timely_throughput",
    "violation_rate",
]

#: Bytes of a v2 record batch's header (Kafka's format; the thesis's batchHeaderSize).
KAFKA_BATCH_HEADER = 61


@dataclass(frozen=True)
class SendInterval:
    """G = intercept + slope · S: a producer's mean send interval per broker [s] as a function
    of the packet size [bytes] (the thesis's f_p), with the fit's R²."""

    intercept: float
    slope: float
    r2: float = math.nan

    def __call__(self, size: np.ndarray) -> np.ndarray:
        return self.intercept + self.slope * np.asarray(size, dtype=float)


def fit_send_interval(sizes: Sequence[float], intervals: Sequence[float]) -> SendInterval:
    """Least-squares line through measured (mean packet size, mean send interval) pairs."""
    x, y = np.asarray(sizes, dtype=float), np.asarray(intervals, dtype=float)
    if x.size < 2 or x.size != y.size or np.ptp(x) == 0:
        raise InputError("sizes", x.tolist(), "two or more distinct sizes, an interval each")
    fit = stats.linregress(x, y)
    return SendInterval(float(fit.intercept), float(fit.slope), float(fit.rvalue**2))


@dataclass(frozen=True)
class ProducerThroughput:
    """Eq. 4.1 and §2.3, per broker (arrays) and in all."""

    packet_bytes: np.ndarray  # S_r
    packets_per_s: np.ndarray  # R_s = 1 / G_s
    messages_per_s: float  # X_sm
    bytes_per_s: float  # X'_sp, the bandwidth needed
    payload_bytes_per_s: float  # X'_sm
    relative_payload: float  # φ_ps = X'_sm / X'_sp


def producer_throughput(
    message_bytes: float,
    batch_messages: int,
    leaders: Sequence[int],
    send_interval: Callable[[np.ndarray], np.ndarray],
    *,
    batch_header: float = KAFKA_BATCH_HEADER,
    packet_header: float = 0.0,
    compression: float = 1.0,
) -> ProducerThroughput:
    """A producer with full batches of ``batch_messages`` messages of ``message_bytes`` to
    brokers holding ``leaders`` leader partitions each (the matrix P)."""
    p = np.asarray(leaders, dtype=float)
    if np.any(p < 0) or not p.sum() > 0:
        raise InputError("leaders", list(leaders), "leader partitions per broker, some > 0")
    s_b = (message_bytes * batch_messages + batch_header) / compression
    s_r = s_b * p + packet_header
    g = np.asarray(send_interval(s_r), dtype=float)
    if np.any(g <= 0):
        raise InputError("send_interval", g.tolist(), "positive seconds at these packet sizes")
    r = np.where(p > 0, 1.0 / g, 0.0)
    msgs = float(r @ (batch_messages * p))
    sent = float(r @ s_r)
    payload = message_bytes * msgs
    return ProducerThroughput(s_r, r, msgs, sent, payload, payload / sent)


#: How a producer packs batches into requests: one request per broker carrying a batch for
#: each of its leader partitions (the Java client, the thesis's eq. 4.1), or one batch per
#: request (librdkafka: one partition per ProduceRequest).
PACKINGS = ("broker", "partition")


@dataclass(frozen=True)
class ThroughputModel:
    """Eq. 4.1 calibrated on measurements: the request bytes S_r = h_p + k (h_b + S_m B) of full
    batches of B messages, k batches a request (the leader partitions P with ``broker``
    packing, 1 with ``partition``), and the send interval line f_p."""

    packet_header: float  # h_p
    batch_header: float  # h_b
    message_bytes: float  # S_m, a message with its record framing
    send_interval: SendInterval
    packing: str = "broker"

    def predict(self, batch_messages: int, leaders: Sequence[int]) -> ProducerThroughput:
        per_request = leaders if self.packing == "broker" else [1 if p > 0 else 0 for p in leaders]
        return producer_throughput(
            self.message_bytes, batch_messages, per_request, self.send_interval,
            batch_header=self.batch_header, packet_header=self.packet_header,
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {"packing": self.packing, "packet_header": self.packet_header,
                "batch_header": self.batch_header, "message_bytes": self.message_bytes,
                "send_interval_intercept_s": self.send_interval.intercept,
                "send_interval_slope_s_per_byte": self.send_interval.slope,
                "send_interval_r2": self.send_interval.r2}  # fmt: skip


def fit_throughput(
    batch_messages: Sequence[float],
    partitions: Sequence[float],
    packet_bytes: Sequence[float],
    send_interval_s: Sequence[float],
    packing: str = "broker",
) -> ThroughputModel:
    """The request-size terms by least squares on measured mean request sizes (columns 1, k,
    k·B with k batches a request: P or 1 by ``packing``), and f_p on measured (request size,
    send interval) pairs. Where k never varies the batch header cannot be told from the
    request header: it is folded into the latter."""
    if packing not in PACKINGS:
        raise InputError("packing", packing, "broker or partition")
    b = np.asarray(batch_messages, dtype=float)
    p = np.asarray(partitions, dtype=float)
    s = np.asarray(packet_bytes, dtype=float)
    if not (b.size == p.size == s.size == len(send_interval_s)) or b.size < 2:
        raise InputError("rows", b.size, "two or more measured configurations, each complete")
    k = p if packing == "broker" else np.ones_like(p)
    if np.ptp(b * k) == 0:
        raise InputError("batch_messages", b.tolist(), "two or more messages-per-request values")
    if np.ptp(k) > 0 and b.size >= 3:
        coef = np.linalg.lstsq(np.column_stack([np.ones_like(k), k, b * k]), s, rcond=None)[0]
        h_p, h_b, s_m = (float(c) for c in coef)
    else:
        h_p, s_m = (float(c) for c in np.polyfit(b * k, s, 1)[::-1])
        h_b = 0.0
    return ThroughputModel(h_p, h_b, s_m, fit_send_interval(s, send_interval_s), packing)


def storage_growth(
    bytes_per_s: Sequence[float],
    seconds: float,
    *,
    index_interval_bytes: int = 4096,
    replication: int = 1,
    brokers: int | None = None,
) -> np.ndarray:
    """Bytes stored per broker after ``seconds`` (eq. 4.2: (1 + 8 / index.interval.bytes) T R∘S),
    with each leader's bytes copied to ``replication - 1`` followers spread evenly over the
    other brokers (the thesis counts the leaders' only)."""
    x = np.asarray(bytes_per_s, dtype=float)
    n = brokers or x.size
    if not 1 <= replication <= n:
        raise InputError("replication", replication, f"1 to the {n} brokers")
    lead = (1.0 + 8.0 / index_interval_bytes) * seconds * x
    if replication == 1 or n == 1:
        return lead
    followers = (lead.sum() - lead) * (replication - 1) / (n - 1)
    return lead + followers


def packet_latency(
    arrival_rates: Mapping[str, float], services: Mapping[str, PhaseType], *, synchronous: bool
) -> float:
    """Mean latency of a packet at one broker: M/PH/1 response times of the ``produce``,
    ``replica`` and ``fetch`` request streams, summed; asynchronous replication leaves the
    replica fetch out (§2.6)."""
    kinds = ("produce", "replica", "fetch") if synchronous else ("produce", "fetch")
    return sum(mph1(arrival_rates[k], services[k]).response_time for k in kinds)


def kpi(
    bandwidth_use: float,
    service_rate: float,
    loss: float,
    duplication: float,
    weights: Sequence[float] = (0.3, 0.3, 0.3, 0.1),
) -> float:
    """γ = ω₁φ + ω₂μ + ω₃(1 − P_l) + ω₄(1 − P_d) (eq. 5.2; default weights the thesis's)."""
    w = np.asarray(weights, dtype=float)
    if w.size != 4 or np.any(w < 0) or abs(w.sum() - 1.0) > 1e-9:
        raise InputError("weights", list(weights), "four weights >= 0 summing to 1")
    return float(w @ [bandwidth_use, service_rate, 1.0 - loss, 1.0 - duplication])


def gilbert_elliott(p: float, r: float, h: float = 0.0, k: float = 1.0) -> dict[str, float]:
    """Stationary loss and mean burst of a Gilbert–Elliott channel: good → bad with ``p``,
    bad → good with ``r``, a packet passes with ``k`` in the good state and ``h`` in the bad
    one (netem's p, r, 1−h, 1−k): loss = (p(1−h) + r(1−k)) / (p + r), bad bursts of 1/r."""
    if not (0 < p <= 1 and 0 < r <= 1 and 0 <= h <= 1 and 0 <= k <= 1):
        raise InputError("gilbert_elliott", (p, r, h, k), "p, r in (0, 1]; h, k in [0, 1]")
    return {
        "loss": (p * (1 - h) + r * (1 - k)) / (p + r),
        "bad_share": p / (p + r),
        "mean_bad_burst": 1.0 / r,
    }


def violation_rate(
    deadline: float,
    *,
    gamma: tuple[float, float] | None = None,
    ph: PhaseType | None = None,
    uniform: tuple[float, float] | None = None,
    alpha: float = 0.9,
) -> float:
    """η_v = P(L > ζ) from one of the thesis's three stages: ``gamma`` (shape, scale) for
    single-message batches (eq. 6.4), ``ph`` for batches bound by size (eq. 6.5:
    π e^{Tζ} e), or ``uniform`` (L_min, L_max) for batches bound by linger (eq. 6.6:
    (α L_max − ζ) / (α L_max − L_min), clipped to [0, 1])."""
    given = [g is not None for g in (gamma, ph, uniform)]
    if sum(given) != 1:
        raise InputError("violation_rate", sum(given), "exactly one of gamma, ph, uniform")
    if gamma is not None:
        return float(stats.gamma.sf(deadline, gamma[0], scale=gamma[1]))
    if ph is not None:
        return float(ph.sf(deadline)[0])
    lo, hi = uniform  # type: ignore[misc]
    return float(np.clip((alpha * hi - deadline) / (alpha * hi - lo), 0.0, 1.0))


def timely_throughput(throughput: float, violation: float, loss: float = 0.0) -> float:
    """χ' = (1 − η_v)(1 − η_l) χ (eq. 6.9): messages/s that arrive, and in time."""
    return (1.0 - violation) * (1.0 - loss) * throughput


def reactive_batch_size(
    candidates: Mapping[int, tuple[float, float, float]],
) -> tuple[int, float]:
    """The batch size of the highest timely throughput among ``candidates``
    (batch size → (throughput χ, violation rate η_v, loss rate η_l)); ties go to the smaller
    batch. Returns (batch size, its χ')."""
    if not candidates:
        raise InputError("candidates", {}, "at least one batch size")
    scored = {b: timely_throughput(*v) for b, v in candidates.items()}
    best = max(sorted(scored), key=lambda b: scored[b])
    return best, scored[best]
