"""What-if: the calibrated model with changed resources, predicted next to the measured system.

Changes are ``TIER.FIELD=VALUE`` or ``FIELD=VALUE``:

=====================  ============================================================================
change                 meaning
=====================  ============================================================================
``db.servers=2``       replicas of the tier (``replicas`` is the same); reads spread over them,
                       a replicated last tier runs writes at every replica
``app.cpu=1.0``        CPU quota of each replica, cores (``none``: no quota); processes follow the
                       quota as the runner sets them
``app.processes=2``    OS processes per replica (cores usable at once)
``db.demand=0.002``    CPU seconds per request at the tier; ``*0.5`` scales the measured demand
``think_time=1.0``     users' mean think time, s
``outside_delay=0``    time outside the tiers, s
``stalls=none``        without the run's injected stalls (the system once the pauses are fixed)
``host.background=0``  cores' worth of other processes on the tiers' host (0: a quiet machine;
                       ``*2`` scales the measured); the load generator's CPU stays
``host.cores=4``       cores of the host the tiers share (``none``: a core whenever a tier may run)
=====================  ============================================================================

``host.`` is not a tier: it names the machine the run measured (the model's
:class:`tierscope.domains.ntier.HostModel`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tierscope.domains.ntier import (
    HostModel,
    NTierModel,
    Prediction,
    TierFacts,
    TierModel,
    finite,
    predict,
)
from tierscope.errors import InputError

TIER_FIELDS = ("servers", "replicas", "cpu", "processes", "demand")
MODEL_FIELDS = ("think_time", "outside_delay", "stalls")
HOST_FIELDS = ("cores", "background")


def parse_change(text: str) -> tuple[str | None, str, str]:
    """``db.servers=2`` -> ("db", "servers", "2"); ``think_time=1`` -> (None, "think_time", "1")."""
    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key or not value:
        raise InputError("--set", text, "TIER.FIELD=VALUE or FIELD=VALUE, e.g. db.servers=2")
    tier, dot, name = key.rpartition(".")
    if not dot:
        if key not in MODEL_FIELDS:
            raise InputError("--set", text, "a field " + ", ".join(MODEL_FIELDS) + " or TIER.FIELD")
        return None, key, value
    if tier == "host":
        if name not in HOST_FIELDS:
            raise InputError("--set", text, "a host field: " + ", ".join(HOST_FIELDS))
        return tier, name, value
    if name not in TIER_FIELDS:
        raise InputError("--set", text, "a tier field: " + ", ".join(TIER_FIELDS))
    return tier, name, value


def apply_changes(model: NTierModel, changes: list[str]) -> NTierModel:
    """``model`` with every change applied in order."""
    for text in changes:
        tier_name, name, raw = parse_change(text)
        if tier_name is None and name == "stalls":
            if raw != "none":
                raise InputError("--set", text, "stalls=none (the run's injected stalls removed)")
            model = replace(model, stalls=())
            continue
        if tier_name == "host":
            model = replace(model, host=_changed_host(model.host, name, raw, text))
            continue
        if tier_name is None:
            value = _number(text, raw, minimum=0.0)
            model = (
                replace(model, think_time=value)
                if name == "think_time"
                else replace(model, delay=value)
            )
            continue
        if tier_name not in model.names:
            raise InputError("--set", text, "a tier of the run: " + ", ".join(model.names))
        tier = model.tier(tier_name)
        model = model.with_tier(tier_name, _changed_tier(tier, name, raw, text))
    return model


def _changed_host(host: HostModel | None, name: str, raw: str, text: str) -> HostModel | None:
    if name == "cores":
        if raw.lower() in ("none", "null", "unlimited"):
            return None
        cores = _number(text, raw, minimum=1e-6)
        return HostModel(cores) if host is None else replace(host, cores=cores)
    if host is None:
        raise InputError(
            "--set", text, "host.cores=N first: the run did not measure its host's CPU"
        )
    if raw.startswith("*"):
        return replace(host, background=host.background * _number(text, raw[1:], minimum=0.0))
    return replace(host, background=_number(text, raw, minimum=0.0))


def _changed_tier(tier: TierModel, name: str, raw: str, text: str) -> TierModel:
    f: TierFacts = tier.facts
    if name in ("servers", "replicas"):
        n = _integer(text, raw)
        return replace(tier, facts=f.with_changes(replicas=n))
    if name == "processes":
        return replace(tier, facts=replace(f, processes=_integer(text, raw)))
    if name == "cpu":
        if raw.lower() in ("none", "null", "unlimited"):
            return replace(tier, facts=replace(f, cpu=None), background=tier.background)
        cores = _number(text, raw, minimum=1e-6)
        if cores <= tier.background:
            raise InputError(
                "--set", text, f"a quota above the tier's background CPU ({tier.background:.3g})"
            )
        return replace(tier, facts=f.with_changes(cpu=cores))
    if raw.startswith("*"):
        return replace(tier, demand=tier.demand * _number(text, raw[1:], minimum=0.0))
    return replace(tier, demand=_number(text, raw, minimum=0.0))


def _number(text: str, raw: str, *, minimum: float) -> float:
    try:
        v = float(raw)
    except ValueError:
        raise InputError("--set", text, "a number after '='") from None
    if not np.isfinite(v) or v < minimum:
        raise InputError("--set", text, f"a finite number >= {minimum:g}")
    return v


def _integer(text: str, raw: str) -> int:
    try:
        v = int(raw)
    except ValueError:
        raise InputError("--set", text, "an integer >= 1 after '='") from None
    if v < 1:
        raise InputError("--set", text, "an integer >= 1")
    return v


def with_changes(model: NTierModel, changes: list[str]) -> NTierModel:
    """``model`` with the changes applied and its per-request samples following the demands
    (what ``whatif`` predicts, and what ``plan`` plans for with ``--set``)."""
    return scale_demand_samples(model, apply_changes(model, changes))


def scaled_demands(model: NTierModel, factor: float) -> NTierModel:
    """``model`` with every tier's demand (its writes and per-request samples too) times
    ``factor``."""
    new = model
    for t in model.tiers:
        new = new.with_tier(
            t.name, replace(t, demand=t.demand * factor, write_demand=t.write_demand * factor)
        )
    return scale_demand_samples(model, new)


def scale_demand_samples(base: NTierModel, changed: NTierModel) -> NTierModel:
    """Per-request samples follow changed mean demands (the mix keeps its shape)."""
    if base.demand_samples is None:
        return changed
    old = np.array([t.demand for t in base.tiers])
    new = np.array([t.demand for t in changed.tiers])
    factor = np.where(old > 0, new / np.where(old > 0, old, 1), 1.0)
    return replace(changed, demand_samples=base.demand_samples * factor[None, :])


@dataclass
class WhatIf:
    """Predicted curves of the measured system (``baseline``) and the changed one."""

    changes: list[str]
    model: NTierModel
    changed: NTierModel
    levels: list[int]
    baseline: list[Prediction]
    predicted: list[Prediction]
    measured: dict[int, dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        rows = []
        for u, b, c in zip(self.levels, self.baseline, self.predicted, strict=True):
            row: dict[str, Any] = {"users": u, "baseline": b.to_dict(), "changed": c.to_dict()}
            if u in self.measured:
                row["measured"] = self.measured[u]
            rows.append(row)
        return finite(
            {
                "changes": list(self.changes),
                "solver": self.predicted[0].method if self.predicted else None,
                "host": {"baseline": _host_doc(self.model), "changed": _host_doc(self.changed)},
                "capacity": {
                    "baseline": self.model.max_throughput,
                    "changed": self.changed.max_throughput,
                    "baseline_bottleneck": self.model.bottleneck(),
                    "changed_bottleneck": self.changed.bottleneck(),
                },
                "levels": rows,
            }
        )


def _host_doc(model: NTierModel) -> dict[str, float] | None:
    h = model.host
    return None if h is None else {"cores": h.cores, "background": h.background}


def whatif(
    model: NTierModel,
    changes: list[str],
    levels: list[int],
    *,
    solver: str = "auto",
    duration: float = 300.0,
    seed: int = 1,
    measured: dict[int, dict[str, Any]] | None = None,
) -> WhatIf:
    """Predictions of the measured and the changed system at ``levels`` (same random streams,
    so the difference between the curves is the change, not noise)."""
    if not changes:
        raise InputError("--set", None, "at least one change, e.g. --set db.servers=2")
    if not levels:
        raise InputError("--levels", levels, "at least one number of users")
    changed = with_changes(model, changes)
    return WhatIf(
        changes=list(changes),
        model=model,
        changed=changed,
        levels=[int(u) for u in levels],
        baseline=predict(model, levels, solver=solver, duration=duration, seed=seed),
        predicted=predict(changed, levels, solver=solver, duration=duration, seed=seed),
        measured=dict(measured or {}),
    )


__all__ = [
    "HOST_FIELDS",
    "MODEL_FIELDS",
    "TIER_FIELDS",
    "WhatIf",
    "apply_changes",
    "parse_change",
    "whatif",
    "with_changes",
]
