"""Schema of the prices file of ``tierscope plan --prices FILE`` (YAML).

```yaml
currency: USD
tiers:                       # cost of the resources, per hour; 'default' applies to the others
  default: {node_per_hour: 0.0, core_per_hour: 4.0}
  db: {node_per_hour: 0.5, core_per_hour: 6.0}
revenue:                     # Malkowski's SLA (seed 001 §2.3): earned per request answered within
  - {up_to: 0.5, per_request: 0.000033}    # each response-time band (seconds, in order) ...
  - {up_to: 1.0, per_request: 0.000027}
beyond: -0.000033            # ... and earned (negative: a penalty) per request slower than all
search:                      # the configurations plan may choose from
  replicas: [1, 2, 3]
  cpu: [0.2, 0.3, 0.5, 0.8, 1.0]     # cores per replica (plan skips quotas below 0.2)
  tiers: [app, db]           # tiers that may change (default: all)
```

Every field is optional. Without ``revenue`` the bands are those of the CloudXplor case study
(Table 16: 0.0033, 0.0027, 0.0020, 0.0013, 0.0007 cent per request within 1..5 s, -0.0033 cent
beyond) with the band edges scaled so that the first one is the SLO's threshold. Without
``tiers`` a replica costs $4 per core of its quota per hour (the case study's $4 per node-hour,
with a node of one core).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tierscope.spec._load import load_yaml
from tierscope.spec._types import validated

NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
_STRICT = ConfigDict(extra="forbid", frozen=True)

#: CloudXplor's SLA (seed 001 Table 16): dollars per request for bands of 1 s; beyond 5 s.
CASE_STUDY_BANDS = (0.000033, 0.000027, 0.000020, 0.000013, 0.000007)
CASE_STUDY_BEYOND = -0.000033
CASE_STUDY_CORE_PER_HOUR = 4.0


class TierPrice(BaseModel):
    model_config = _STRICT

    node_per_hour: NonNegFloat = 0.0
    core_per_hour: NonNegFloat = CASE_STUDY_CORE_PER_HOUR


class Band(BaseModel):
    model_config = _STRICT

    up_to: PositiveFloat = Field(description="upper edge of the band, seconds")
    per_request: float = Field(allow_inf_nan=False)


class SearchSpace(BaseModel):
    model_config = _STRICT

    replicas: Annotated[list[Annotated[int, Field(ge=1, le=16)]], Field(min_length=1)] = [1, 2, 3]
    cpu: Annotated[list[PositiveFloat], Field(min_length=1)] = [
        0.2,
        0.25,
        0.3,
        0.4,
        0.5,
        0.6,
        0.8,
        1.0,
    ]
    tiers: list[str] | None = None

    @field_validator("replicas", "cpu")
    @classmethod
    def _unique(cls, v: list) -> list:
        return sorted(set(v))


class Prices(BaseModel):
    """Costs, the SLA's revenue bands and the configurations to search."""

    model_config = _STRICT

    currency: str = "USD"
    tiers: dict[str, TierPrice] = Field(default_factory=dict)
    revenue: list[Band] | None = None
    beyond: float | None = Field(None, allow_inf_nan=False)
    search: SearchSpace = Field(default_factory=SearchSpace)  # type: ignore[arg-type]

    @field_validator("revenue")
    @classmethod
    def _increasing(cls, v: list[Band] | None) -> list[Band] | None:
        if v is not None:
            if not v:
                raise ValueError("at least one band")
            edges = [b.up_to for b in v]
            if any(b <= a for a, b in itertools.pairwise(edges)):
                raise ValueError("band edges 'up_to' must increase")
        return v

    def tier_price(self, tier: str) -> TierPrice:
        return self.tiers.get(tier) or self.tiers.get("default") or TierPrice()

    def bands(self, threshold: float) -> tuple[list[tuple[float, float]], float]:
        """[(edge, value)], beyond: the SLA bands (the case study's, scaled to ``threshold``)."""
        if self.revenue is not None:
            bands = [(b.up_to, b.per_request) for b in self.revenue]
            beyond = self.beyond if self.beyond is not None else -abs(bands[0][1])
            return bands, beyond
        bands = [(threshold * (i + 1), v) for i, v in enumerate(CASE_STUDY_BANDS)]
        return bands, CASE_STUDY_BEYOND if self.beyond is None else self.beyond


def parse_prices(data: object, *, source: str = "<prices>") -> Prices:
    return validated(Prices, data if data is not None else {}, source)


def load_prices(path: str | Path) -> Prices:
    """Read and validate a prices file."""
    return parse_prices(load_yaml(path), source=str(path))


__all__ = ["Band", "Prices", "SearchSpace", "TierPrice", "load_prices", "parse_prices"]
