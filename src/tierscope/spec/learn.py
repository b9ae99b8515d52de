"""Schemas of the learning layer: the corpus spec (``tierscope corpus``), the learning options
(``tierscope learn``), its output document and the metadata of a saved model.

Design decisions:

* A corpus spec is a base experiment plus the *ranges* its setups are drawn from. Setup ``i``
  caps tier ``tiers[i % len(tiers)]`` and draws every other knob from a generator seeded with
  ``(seed, i)``, so the same spec always gives the same setups and a corpus can be extended or
  resumed setup by setup.
* The learn document keeps the contract of issue 8 (``scheme``, ``target``, ``baseline``,
  ``models.<name>.{accuracy, balanced_accuracy, major_mistake_rate}``, ``best``) as required
  fields and allows more beside them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from tierscope.spec._load import load_yaml
from tierscope.spec._types import validated
from tierscope.spec.graph import THREE_TIERS

_STRICT = ConfigDict(extra="forbid", frozen=True)

Target = Literal["saturation", "tier"]
FeatureSet = Literal["all", "recommended", "server", "resource", "latency", "waiting"]
Scheme = Literal["new-setup", "new-level", "both"]
TARGETS: tuple[str, ...] = ("saturation", "tier")
FEATURE_SETS: tuple[str, ...] = ("all", "recommended", "server", "resource", "latency", "waiting")
SCHEMES: tuple[str, ...] = ("new-setup", "new-level", "both")
MODEL_NAMES: tuple[str, ...] = (
    "decision_tree",
    "random_forest",
    "svm",
    "logistic_regression",
    "gradient_boosting",
)


class VarySpec(BaseModel):
    """What changes from setup to setup (every range is [low, high], drawn uniformly)."""

    model_config = _STRICT

    tiers: list[str] | None = Field(
        None, description="the components each setup caps, in turn (default: every one)"
    )
    capped_cpu: tuple[float, float] = (0.12, 0.3)
    """CPU quota (cores) of the capped component."""
    capped_cpu_by_tier: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="capped_cpu for particular components"
    )
    costs_on: list[str] | None = Field(
        None,
        description="components that take a per-request CPU cost (default: every one; "
        "webstack: only app)",
    )
    other_cpu: tuple[float, float] = (0.6, 1.0)
    """CPU quota of the other tiers."""
    capped_cost: tuple[float, float] = (0.001, 0.003)
    """Extra CPU seconds per request in the capped tier (per-interaction cost, 'default')."""
    other_cost: tuple[float, float] = (0.0, 0.0005)
    """Extra CPU seconds per request in the other tiers."""
    replicas: tuple[int, int] = (1, 1)
    """Replicas of each uncapped tier (the capped one keeps one, so it stays the bottleneck)."""
    db_pool: tuple[int, int] | None = None
    """app -> db connection pool size per replica."""
    workers: tuple[int, int] | None = None
    """Worker threads of every tier."""
    mixes: list[str] = Field(default_factory=list, description="workload mixes to draw from")
    think_time: tuple[float, float] | None = None
    """Mean think time [s] of the closed workload."""

    @model_validator(mode="after")
    def _ordered(self) -> VarySpec:
        for name in (
            "capped_cpu",
            "other_cpu",
            "capped_cost",
            "other_cost",
            "replicas",
            "db_pool",
            "workers",
            "think_time",
        ):
            pair = getattr(self, name)
            if pair is not None and not (0 <= pair[0] <= pair[1]):
                raise ValueError(f"{name}: expected [low, high] with 0 <= low <= high")
        if self.tiers is not None and not self.tiers:
            raise ValueError("tiers: at least one component to cap")
        pairs = [self.capped_cpu, self.other_cpu, *self.capped_cpu_by_tier.values()]
        if any(not (0 < p[0] <= p[1]) for p in pairs):
            raise ValueError("cpu quotas: expected [low, high] with 0 < low <= high")
        if self.replicas[0] < 1:
            raise ValueError("replicas: at least 1")
        return self


class CorpusSpec(BaseModel):
    """``tierscope corpus SPEC.yaml``: a base experiment and how its setups vary."""

    model_config = _STRICT

    name: str = "corpus"
    experiment: dict[str, Any] = Field(description="the base experiment document (tierscope run)")
    vary: VarySpec = Field(default_factory=VarySpec)  # type: ignore[arg-type]
    seed: int = 1

    @property
    def components(self) -> list[str]:
        """The experiment's components (web, app, db for the three-tier shorthand)."""
        system = self.experiment.get("system") or {}
        given = system.get("components") if isinstance(system, dict) else None
        return list(given) if isinstance(given, dict) else list(THREE_TIERS)

    @property
    def shorthand(self) -> bool:
        system = self.experiment.get("system") or {}
        return not (isinstance(system, dict) and isinstance(system.get("components"), dict))

    @property
    def capped(self) -> list[str]:
        return self.vary.tiers if self.vary.tiers is not None else self.components

    @property
    def costs_on(self) -> list[str]:
        return self.vary.costs_on if self.vary.costs_on is not None else self.components

    @model_validator(mode="after")
    def _components_exist(self) -> CorpusSpec:
        names = self.components
        for field, given in (
            ("tiers", self.vary.tiers or []),
            ("capped_cpu_by_tier", list(self.vary.capped_cpu_by_tier)),
            ("costs_on", self.vary.costs_on or []),
        ):
            for i, name in enumerate(given):
                if name not in names:
                    raise ValueError(
                        f"vary.{field}[{i}]: {name!r} is not a component of the experiment "
                        f"({', '.join(names)})"
                    )
        if self.vary.db_pool is not None and not self.shorthand:
            raise ValueError(
                "vary.db_pool: the app -> db pool is the three-tier shorthand's; a call graph "
                "has no such tier"
            )
        return self


def load_corpus_spec(path: str | Path) -> CorpusSpec:
    """Read and validate a corpus spec; problems name the file and field."""
    return validated(CorpusSpec, load_yaml(path), str(path))


class LearnOptions(BaseModel):
    """Every knob of ``tierscope learn``."""

    model_config = _STRICT

    target: Target = "saturation"
    features: FeatureSet = "all"
    scheme: Scheme = "new-setup"
    window_s: Annotated[float, Field(gt=0.0, le=600.0)] = 1.0
    """Length of one observation window [s] cut from each steady phase."""
    models: tuple[str, ...] = MODEL_NAMES
    max_folds: Annotated[int, Field(ge=1)] | None = None
    """Evaluate at most this many folds (evenly spread over the scheme's list); None: all."""
    importance_folds: Annotated[int, Field(ge=0)] = 5
    """Folds on which the permutation importance of the best model is measured."""
    compare_features: bool = True
    """Also score every feature set with the best model (the thesis's side-by-side table)."""
    jobs: Annotated[int, Field(ge=-1)] = -1
    """Worker processes that fit folds in parallel (joblib; -1: one per core, 1: none)."""
    seed: int = 0

    @model_validator(mode="after")
    def _known_models(self) -> LearnOptions:
        unknown = [m for m in self.models if m not in MODEL_NAMES]
        if unknown or not self.models:
            raise ValueError(
                f"models: unknown {', '.join(unknown) or '(none given)'}; "
                f"expected some of {', '.join(MODEL_NAMES)}"
            )
        return self

    @field_validator("jobs")
    @classmethod
    def _workers(cls, value: int) -> int:
        if value == 0:
            raise ValueError("-1 (one worker per core) or a number of workers >= 1")
        return value

    @classmethod
    def parse(cls, data: dict[str, Any], source: str = "learn options") -> LearnOptions:
        return validated(cls, data, source)


class ModelScore(BaseModel):
    model_config = ConfigDict(extra="allow")

    accuracy: float
    balanced_accuracy: float
    major_mistake_rate: float | None


class LearnDocument(BaseModel):
    """The ``tierscope learn --json`` document (issue 8 contract, plus details)."""

    model_config = ConfigDict(extra="allow")

    scheme: Scheme
    target: Target
    baseline: float
    models: dict[str, ModelScore]
    best: str


class SavedModelInfo(BaseModel):
    """What a saved model file carries beside the fitted estimators."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["tierscope-model/1"] = "tierscope-model/1"
    tierscope_version: str
    sklearn_version: str
    window_s: float
    features: list[str]
    targets: dict[str, dict[str, Any]]
    evaluation: dict[str, Any] | None = None
    """What ``learn`` measured before saving: scheme, scores next to the baseline, importance."""


__all__ = [
    "FEATURE_SETS",
    "MODEL_NAMES",
    "SCHEMES",
    "TARGETS",
    "CorpusSpec",
    "LearnDocument",
    "LearnOptions",
    "SavedModelInfo",
    "VarySpec",
    "load_corpus_spec",
]
