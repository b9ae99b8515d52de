"""Schemas of the analysis: its options and its output document (PRODUCT.md §4.5).

Design decision: the options are one pydantic model with the defaults the docs describe, so the
CLI, the Python API and ``analysis.json`` (which records the options it was made with) share one
definition; the output document is a second model that ``analyze`` validates before returning, so
the contract of §4.5 (keys, kinds, empty lists rather than missing sections) cannot drift.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tierscope.errors import SpecError

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
OpenFraction = Annotated[float, Field(gt=0.0, lt=1.0)]
Positive = Annotated[float, Field(gt=0.0)]

_STRICT = ConfigDict(extra="forbid", frozen=True)
_DOC = ConfigDict(extra="forbid")


class AnalysisOptions(BaseModel):
    """Every knob of ``tierscope analyze``; the defaults are the documented rules."""

    model_config = _STRICT

    # -- saturation (seed 000 §2.4-2.5, seed 001 §2.1)
    margin: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.07
    """M when the run has no "+1 node" companion setup (the thesis's Kafka value)."""
    peak_fraction: OpenFraction = 0.95
    """Th_0.95 = peak_fraction x peak."""
    plus_one_gain: Positive = 0.02
    """Relative gain from which one more node counts as beneficial (the 2 % rule)."""
    slo_s: Positive | None = None
    """Response-time objective [s]; with it the SLO point and the intervention point."""
    slo_statistic: Literal["rt_mean", "rt_p50", "rt_p95", "rt_p99"] = "rt_p95"
    slo_satisfaction: OpenFraction = 0.90
    """Malkowski's floor of the SLO-satisfaction lower band (eq. 10)."""
    # -- bottleneck tier and resource (seed 001 §2.2)
    window_s: Positive = 1.0
    """Length lambda of the windows in which a resource is judged saturated."""
    saturation_threshold: OpenFraction = 0.95
    """alpha: a resource is critically saturated in a window when its mean utilisation >= it."""
    psi_threshold: OpenFraction = 0.5
    """Pressure (PSI 'some') from which the host counts as saturated."""
    client_lag_s: Positive = 0.05
    """Load-generator scheduling lag [s] from which the client counts as saturated."""
    partial_min: Fraction = 0.01
    full_min: Fraction = 0.95
    dependence_alpha: OpenFraction = 0.05
    """Significance level of the permutation test of dependence between two resources."""
    permutations: Annotated[int, Field(ge=19, le=100_000)] = 999
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    # -- indicators (seed 000 §2.6-2.7)
    change_p: OpenFraction = 0.05
    """Significance of a trend change (permutation test of the segmented fits against a
    straight line; ``permutations`` orderings, ``seed``)."""
    min_effect: OpenFraction = 0.1
    """Smallest trend change that counts, as a fraction of the metric's range."""
    # -- millibottlenecks (seed 003, seed 001 ch. IV)
    mb_window_s: Positive = 0.05
    millibottleneck_max_s: Positive = 1.0
    """Episodes shorter than this are millibottlenecks, longer ones saturations."""
    vlrt_s: Positive = 1.0
    """Very long response time threshold [s]."""
    min_delay_s: Positive = 0.05
    """Smallest delay [s] an episode must add to the tier's typical response time."""
    min_peak_queue: Annotated[float, Field(ge=1.0)] = 2.0
    """Requests that must be in the tier at once at an episode's peak: one slow request with
    nobody waiting behind it is a slow request, not a bottleneck."""
    rt_factor: Annotated[float, Field(gt=1.0)] = 5.0
    """An episode's slowest point-in-time response time must reach this multiple of the typical."""
    core_fraction: OpenFraction = 0.1
    """An episode spans the windows whose excess queue is at least this fraction of its peak's."""
    merge_gap_s: Annotated[float, Field(ge=0.0)] = 0.1
    """Bottleneck windows separated by at most this gap form one episode."""
    # -- suspects (incident data)
    normal_until_s: Annotated[float, Field(allow_inf_nan=False)] | None = None
    """Incident data: the samples before this time [s] are normal behaviour (else a
    ``baseline`` setup, else the first fifth of the data)."""

    @classmethod
    def parse(
        cls, data: dict[str, Any] | None, source: str = "analysis options"
    ) -> AnalysisOptions:
        """Validate ``data``; problems become a :class:`SpecError` naming each field."""
        try:
            return cls.model_validate(data or {})
        except ValidationError as exc:
            errors = [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()]
            raise SpecError(source, errors) from None


Label = Literal["client", "gray", "server"]
Category = Literal["reliable", "partially reliable", "not reliable", "misleading", "unidentified"]


class CurvePoint(BaseModel):
    model_config = _DOC
    level: float
    reps: int
    throughput: float
    throughput_std: float | None
    throughput_min: float
    throughput_max: float
    rt_mean: float | None
    rt_p95: float | None
    label: Label


class LevelLabel(BaseModel):
    model_config = _DOC
    level: float
    rep: int
    label: Label


class UslDoc(BaseModel):
    model_config = _DOC
    sigma: float
    kappa: float
    lambda_: Annotated[float, Field(alias="lambda")]
    n_peak: float | None
    x_peak: float | None
    r2: float | None
    concurrency: Literal["level", "little"]


class InterventionDoc(BaseModel):
    model_config = _DOC
    level: float | None
    method: str
    p_value: float | None
    mean_before: float | None
    mean_after: float | None


class Saturation(BaseModel):
    model_config = _DOC
    setup: str
    peak_level: float
    peak_throughput: float
    th95: float
    th_limit: float
    margin: float
    margin_source: str
    margin_range: list[float | None] | None
    first_server_level: float
    knee_level: float | None
    slo_level: float | None
    intervention: InterventionDoc | None
    slo_intervention_level: float | None
    labels: list[LevelLabel]
    curve: list[CurvePoint]
    usl: UslDoc | None
    notes: list[str]


class ResourceDoc(BaseModel):
    model_config = _DOC
    tier: str
    node: str
    resource: str
    saturation_fraction: float
    state: Literal["full", "partial"]
    #: ``push-back``: a pool full because a hardware resource downstream is saturated.
    role: Literal["bottleneck", "client", "push-back", "host"]
    mean_utilization: float | None
    #: the parts found full, where the resource has several: a component's pools to its
    #: callees (``pool_util:<callee>``), by callee name
    parts: list[str] | None = None


class PairDoc(BaseModel):
    model_config = _DOC
    a: str
    b: str
    overlap: float
    expected: float
    lift: float | None
    phi: float | None
    p_alternating: float
    p_together: float
    relation: Literal["alternating", "together", "independent"]


class QueueGrowth(BaseModel):
    model_config = _DOC
    tier: str
    first: float
    last: float
    per_s: float | None


class Bottleneck(BaseModel):
    model_config = _DOC
    setup: str
    level: float | None
    kind: Literal["none", "single", "concurrent", "oscillatory", "client"]
    pattern: Literal["none", "single", "simultaneous", "concurrent", "oscillatory", "client"]
    primary: ResourceDoc | None
    primary_fraction: float | None
    label: Label | None
    windows: int
    resources: list[ResourceDoc]
    pairs: list[PairDoc]
    growing_queues: list[QueueGrowth]
    evidence: str


class IndicatorSetup(BaseModel):
    """One metric on one setup: the fit behind its category."""

    model_config = _DOC
    category: Category
    shape: str | None
    breaks: list[float]
    p_value: float | None
    orderings: int | None
    effect: float
    separable: bool
    direction: Literal["up", "down"] | None
    threshold: float | None
    shift_zone: list[float] | None
    zone_places: list[int] | None
    levels: int
    evidence: str
    insufficient: str | None


class Indicator(BaseModel):
    model_config = _DOC
    metric: str
    tier: str
    category: Category
    per_setup: dict[str, Category]
    counts: dict[str, int]
    evidence: str
    shape: str | None = None
    p_value: float | None = None
    effect: float | None = None
    direction: Literal["up", "down"] | None = None
    threshold: float | None = None
    setups: dict[str, IndicatorSetup] = {}
    #: What the data cannot tell (one setup, too few levels), instead of a default verdict.
    insufficient: str | None = None


class IndicatorSet(BaseModel):
    model_config = _DOC
    variant: Literal["any", "server-side", "never misleading"]
    metrics: list[str]
    covered: list[str]
    uncovered: list[str]
    insufficient: str | None = None


class PausedDoc(BaseModel):
    model_config = _DOC
    tier: str
    start: float
    end: float


class Episode(BaseModel):
    model_config = _DOC
    tier: str
    node: str | None
    resource: str
    start: float
    end: float
    duration: float
    kind: Literal["millibottleneck", "saturation"]
    source: Literal["requests", "metrics"]
    peak_queue: float | None
    saturation_load: float | None
    backlog_s: float | None
    delay_s: float | None
    root_tier: str
    incident: int
    onset_order: list[str]
    #: The tier found paused (accepting and completing nothing) at the incident's start.
    paused: PausedDoc | None = None
    #: The root the onsets named, where the incident is the push-back of a hardware bottleneck
    #: behind it (``root_tier`` is then that bottleneck's tier).
    pushed_from: str | None = None
    resource_confirmed: bool | None
    setup: str | None
    level: float | None
    rep: int | None
    vlrt_requests: int


class TierLoad(BaseModel):
    model_config = _DOC
    tier: str
    saturation_load: float | None
    capacity: float | None
    windows: int
    bottleneck_windows: int


class Vlrt(BaseModel):
    model_config = _DOC
    threshold_s: float
    count: int
    explained: int
    explained_fraction: float | None
    tier: str | None


class EpisodeGroup(BaseModel):
    """A cause behind several episodes (``tierscope.analysis.episodes.group_episodes``)."""

    model_config = _DOC
    kind: Literal["periodic", "saturation", "one-off"]
    root_tier: str
    resource: str
    tiers: list[str]
    count: int
    stalls: int
    period_s: float | None
    period_spread_s: float | None
    p_value: float | None
    typical_duration_s: float
    typical_pause_s: float | None
    total_duration_s: float
    busy_fraction: float | None
    first: float
    last: float
    setups: list[str]
    levels: list[float]
    vlrt_requests: int
    #: Indices into ``episodes``.
    episodes: list[int]
    summary: str


class Suspect(BaseModel):
    """A component ranked as the cause of an incident (``tierscope.analysis.suspects``)."""

    model_config = _DOC
    tier: str
    resource: str
    metric: str
    score: float
    onset: float | None
    evidence: str


class AnalysisDocument(BaseModel):
    """The whole of ``analysis.json``; the first five keys are PRODUCT.md §4.5."""

    model_config = _DOC
    saturation: list[Saturation]
    bottlenecks: list[Bottleneck]
    indicators: list[Indicator]
    episodes: list[Episode]
    vlrt: Vlrt
    episode_groups: list[EpisodeGroup]
    indicator_sets: list[IndicatorSet]
    tier_loads: list[TierLoad]
    tiers: list[str]
    notes: list[str]
    options: dict[str, Any]
    run: dict[str, Any]
    #: Incident data (no load levels): every component ranked as the cause, best first.
    suspects: list[Suspect] = Field(default_factory=list)
