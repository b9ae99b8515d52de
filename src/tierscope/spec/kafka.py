"""Schema of what a ``system.kind: kafka`` spec adds: the topic, the producers' and consumers'
workload with the producer settings of Wu's thesis (seed 002), network faults on the links
between clients and brokers, and the reliability grid (``sweep.grid``).

Design decisions:

* Producer settings keep the thesis's names (``acks``, ``batch_messages``, ``linger_ms``,
  ``timeout_ms``, ``retries``, ``retry_backoff_ms``, ``idempotence``, ``poll_ms``) and map one to
  one onto librdkafka's (:meth:`ProducerSettings.librdkafka`), so a result row names the
  configuration a user would set.
* ``poll_ms`` is the thesis's polling interval δ: the timeout of the ``poll()`` the producer
  makes before every message (its loop was ``poll(δ); produce(...)``). It serves delivery
  reports, and it also slows a producer that has nothing to wait for; without it the producer
  polls only while it waits for the next message of its schedule.
* ``control`` says how ``tierscope kafka adapt`` changes the producer's settings while the
  network faults play as a staged trace: ``static`` (never), ``dynamic`` (Wu's Algorithm 1 on
  the KPI γ) or ``reactive`` (the batch size of the highest timely throughput), deciding every
  ``interval`` seconds among ``candidates``.
* A network fault names a **link** (``producer-brokers``, ``consumer-brokers``,
  ``broker-broker``) and applies to it in both directions, as the thesis's netem did on every
  container; delay and loss use netem's distributions (:mod:`tierscope.experiment.netem`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tierscope.spec._types import (
    NonNegFloat,
    NonNegInt,
    PositiveFloat,
    PositiveInt,
    Probability,
    validated,
)

_STRICT = ConfigDict(extra="forbid", frozen=True)

#: The links a network fault may name.
LINKS = ("producer-brokers", "consumer-brokers", "broker-broker")
#: What ``sweep.grid`` may vary: producer settings, the message size, the topic's partitions,
#: and the producer link's packet loss probability (``loss``) and one-way delay in seconds
#: (``delay``).
PRODUCER_FIELDS = (
    "acks", "batch_messages", "batch_bytes", "linger_ms", "timeout_ms", "request_timeout_ms",
    "socket_timeout_ms", "retries", "retry_backoff_ms", "idempotence", "poll_ms", "buffer_kb",
)  # fmt: skip
GRID_KEYS = (*PRODUCER_FIELDS, "message_size", "partitions", "loss", "delay")


class TopicSpec(BaseModel):
    """The topic the producers write to (a fresh one per level or configuration)."""

    model_config = _STRICT

    partitions: PositiveInt = 1
    replication: PositiveInt = 1
    min_insync: PositiveInt = Field(1, description="min.insync.replicas (acks=all waits for it)")


def _acks(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"expected acks 0, 1 or all, got {str(value).lower()}")
    if value in (0, 1, "0", "1"):
        return int(value)
    if value in ("all", -1, "-1"):
        return "all"
    shown = value if isinstance(value, int | float) else repr(str(value)[:40])
    raise ValueError(f"expected acks 0, 1 or all, got {shown}")


class ProducerSettings(BaseModel):
    """The producer configuration of the thesis, by its names (librdkafka's in comments)."""

    model_config = _STRICT

    acks: Literal[0, 1, "all"] = Field(1, description="request.required.acks: 0, 1 or all")
    batch_messages: PositiveInt = Field(10_000, description="batch.num.messages")
    batch_bytes: PositiveInt | None = Field(None, description="batch.size (bytes)")
    linger_ms: NonNegFloat = Field(5.0, description="linger.ms (queue.buffering.max.ms)")
    timeout_ms: PositiveInt = Field(30_000, description="message.timeout.ms")
    request_timeout_ms: PositiveInt | None = Field(
        None,
        description="request.timeout.ms: the broker's wait for acks (default 30 s, at "
        "most timeout_ms)",
    )
    socket_timeout_ms: Annotated[int, Field(ge=10)] | None = Field(
        None, description="socket.timeout.ms: the client's wait for a response (default 60 s)"
    )
    retries: NonNegInt = Field(2_147_483_647, description="message.send.max.retries")
    retry_backoff_ms: NonNegInt = Field(100, description="retry.backoff.ms")
    idempotence: bool = Field(False, description="enable.idempotence")
    poll_ms: NonNegFloat | None = Field(None, description="poll(δ) before every message")
    buffer_kb: PositiveInt | None = Field(None, description="queue.buffering.max.kbytes")

    @field_validator("acks", mode="before")
    @classmethod
    def _acks(cls, v: Any) -> Any:
        return _acks(v)

    @model_validator(mode="after")
    def _idempotence(self) -> ProducerSettings:
        if self.idempotence and self.acks != "all":
            raise ValueError("idempotence needs acks: all (librdkafka refuses it otherwise)")
        return self

    def librdkafka(self) -> dict[str, Any]:
        """The same settings in librdkafka's names."""
        conf: dict[str, Any] = {
            "acks": -1 if self.acks == "all" else self.acks,
            "batch.num.messages": self.batch_messages,
            "linger.ms": self.linger_ms,
            "message.timeout.ms": self.timeout_ms,
            "message.send.max.retries": self.retries,
            "retry.backoff.ms": self.retry_backoff_ms,
            "enable.idempotence": self.idempotence,
        }
        if self.batch_bytes is not None:
            conf["batch.size"] = self.batch_bytes
        if self.buffer_kb is not None:
            conf["queue.buffering.max.kbytes"] = self.buffer_kb
        if self.socket_timeout_ms is not None:
            conf["socket.timeout.ms"] = self.socket_timeout_ms
        # a request times out no later than its messages (librdkafka's default is 30 s)
        request = min(self.request_timeout_ms or 30_000, self.timeout_ms)
        if request != 30_000:
            conf["request.timeout.ms"] = request
        return conf


class ConsumerSettings(BaseModel):
    model_config = _STRICT

    fetch_wait_ms: NonNegInt = Field(100, description="fetch.wait.max.ms (long poll)")


class KafkaWorkload(BaseModel):
    """Producers at an open rate (``sweep.levels``: messages/s per producer) and consumers."""

    model_config = _STRICT

    mode: Literal["open"] = "open"
    producers: PositiveInt = 1
    consumers: NonNegInt = 1
    message_size: PositiveInt = Field(200, description="bytes of each message's value")
    arrivals: Literal["poisson", "uniform"] = Field(
        "poisson", description="inter-arrival times of each producer's messages"
    )
    producer: ProducerSettings = Field(default_factory=ProducerSettings)  # type: ignore[arg-type]
    consumer: ConsumerSettings = Field(default_factory=ConsumerSettings)  # type: ignore[arg-type]

    @field_validator("message_size")
    @classmethod
    def _size(cls, v: int) -> int:
        if v > 1_000_000:
            raise ValueError(f"expected at most 1,000,000 bytes (Kafka's default limit), got {v:,}")
        return v


class DelaySpec(BaseModel):
    """One-way delay of each packet (seconds), netem's distributions."""

    model_config = _STRICT

    dist: Literal["constant", "uniform", "normal", "pareto"] = "constant"
    mean: NonNegFloat
    jitter: NonNegFloat = 0.0
    correlation: Probability = 0.0

    @model_validator(mode="after")
    def _shape(self) -> DelaySpec:
        if self.mean > 60:
            raise ValueError(f"expected a delay in seconds (at most 60), got {self.mean:g}")
        if self.dist == "pareto" and self.jitter <= 0:
            raise ValueError("a Pareto delay needs jitter > 0 (its standard deviation)")
        if self.dist == "constant" and (self.jitter or self.correlation):
            raise ValueError("a constant delay has no jitter or correlation (dist: uniform?)")
        return self

    def native(self) -> dict[str, Any]:
        if self.dist == "constant":
            return {"dist": "constant", "mean": self.mean}
        return self.model_dump()


class LossSpec(BaseModel):
    """Packet loss: Bernoulli with probability ``p``, or netem's Gilbert–Elliott model (``p``:
    good -> bad, ``r``: bad -> good, ``bad_loss``/``good_loss``: loss in each state)."""

    model_config = _STRICT

    model: Literal["bernoulli", "gilbert_elliott"] = "bernoulli"
    p: Probability
    correlation: Probability | None = None
    r: Probability | None = None
    bad_loss: Probability | None = None
    good_loss: Probability | None = None

    @model_validator(mode="after")
    def _shape(self) -> LossSpec:
        ge = ("r", "bad_loss", "good_loss")
        if self.model == "bernoulli":
            given = [k for k in ge if getattr(self, k) is not None]
            if given:
                raise ValueError(f"{given[0]} belongs to model gilbert_elliott")
        else:
            if self.r is None or self.r <= 0:
                raise ValueError("gilbert_elliott needs r > 0 (the bad -> good probability)")
            if self.correlation is not None:
                raise ValueError("correlation belongs to model bernoulli")
        return self

    def native(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


#: What the controller may change, in Algorithm 1's order, and the values it steps through by
#: default (acks by guarantee, the others ascending).
CONTROL_DEFAULTS: dict[str, list[Any]] = {
    "acks": [0, 1, "all"],
    "batch_messages": [1, 2, 5, 10, 20, 50],
    "timeout_ms": [500, 1000, 2000, 5000, 30000],
    "poll_ms": [0, 1, 5, 10, 50],
}


class ControlSpec(BaseModel):
    """How ``tierscope kafka adapt`` reconfigures the live producer (see the module)."""

    model_config = _STRICT

    policy: Literal["static", "dynamic", "reactive"] = "dynamic"
    interval: Annotated[float, Field(ge=1, le=3600, allow_inf_nan=False)] = Field(
        60.0, description="seconds between decisions (the thesis: 60)"
    )
    target: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = Field(
        0.9, description="dynamic: the KPI γ wanted (γ is between 0 and 1 here)"
    )
    weights: tuple[NonNegFloat, NonNegFloat, NonNegFloat, NonNegFloat] = Field(
        (0.3, 0.3, 0.3, 0.1),
        description="γ = w1 φ + w2 μ + w3 (1 - P_l) + w4 (1 - P_d) (the thesis's default)",
    )
    deadline_ms: PositiveFloat = Field(
        1000.0, description="ζ: a message acknowledged later than this is late"
    )
    candidates: dict[str, list[Any]] = Field(
        default_factory=lambda: dict(CONTROL_DEFAULTS),
        description="the values each setting may take (acks, batch_messages, timeout_ms, poll_ms)",
    )

    @field_validator("weights")
    @classmethod
    def _sum(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if abs(sum(v) - 1.0) > 1e-6:
            raise ValueError(f"expected four weights summing to 1, got {sum(v):g}")
        return v

    @field_validator("candidates")
    @classmethod
    def _candidates(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        for key, values in v.items():
            if key not in CONTROL_DEFAULTS:
                raise ValueError(f"{key[:80]!r} is not a setting the controller changes "
                                 f"({', '.join(CONTROL_DEFAULTS)})")  # fmt: skip
            if not isinstance(values, list) or not values:
                raise ValueError(f"{key}: expected a non-empty list of values")
            try:  # each value must be a valid setting
                checked = [getattr(ProducerSettings(**{key: x}), key) for x in values]
            except ValidationError as exc:
                why = exc.errors()[0]["msg"].removeprefix("Value error, ")
                raise ValueError(f"{key}: {why}") from None
            if key == "acks":
                checked = sorted(set(checked), key=lambda a: 2 if a == "all" else int(a))
            else:
                checked = sorted(set(checked))
            out[key] = checked
        return out


class NetworkFault(BaseModel):
    """The part of a fault of kind ``network`` that says what happens to the link's packets."""

    model_config = _STRICT

    link: str
    delay: DelaySpec | None = None
    loss: LossSpec | None = None


def link_problem(link: str, brokers: int, workload: KafkaWorkload) -> str | None:
    """Why ``link`` does not exist in this system (None: it does)."""
    if link not in LINKS:
        return f"{link[:80]!r} is not a link ({', '.join(LINKS)})"
    if link == "broker-broker" and brokers < 2:
        return "broker-broker needs at least 2 brokers"
    if link == "consumer-brokers" and workload.consumers < 1:
        return "consumer-brokers needs at least one consumer (workload.consumers)"
    return None


def grid_problem(key: str, values: Any) -> str | None:
    """Why ``sweep.grid.<key>: values`` cannot be swept (None: it can)."""
    if key not in GRID_KEYS:
        return f"{key[:80]!r} is not something the grid varies ({', '.join(GRID_KEYS)})"
    if not isinstance(values, list) or not values:
        return "expected a non-empty list of values"
    return None


def parse_kafka_workload(doc: dict[str, Any], source: str = "<workload>") -> KafkaWorkload:
    """``doc`` as a kafka workload; SpecError naming ``source`` and each bad field."""
    return validated(KafkaWorkload, doc, source)


__all__ = [
    "CONTROL_DEFAULTS",
    "GRID_KEYS",
    "LINKS",
    "ConsumerSettings",
    "ControlSpec",
    "DelaySpec",
    "KafkaWorkload",
    "LossSpec",
    "NetworkFault",
    "ProducerSettings",
    "TopicSpec",
    "grid_problem",
    "link_problem",
    "parse_kafka_workload",
]
