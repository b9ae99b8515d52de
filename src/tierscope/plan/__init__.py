"""From a measured sweep to a calibrated model, what-if predictions and capacity plans.

:func:`calibrate` builds and validates the queueing model of a run folder; :func:`whatif`
predicts the system with changed resources; :func:`plan` finds, per workload level, the cheapest
configuration that meets an SLO and the profit-optimal one (Malkowski's SLA model).
"""

from __future__ import annotations

from tierscope.plan.calibrate import (
    Calibration,
    calibrate,
    fit_model,
    measured_levels,
    model_vs_measurement,
)
from tierscope.plan.planner import Config, LevelPlan, configure, plan, plan_document
from tierscope.plan.sla import Objective, parse_slo
from tierscope.plan.whatif import WhatIf, apply_changes, parse_change, whatif

__all__ = [
    "Calibration",
    "Config",
    "LevelPlan",
    "Objective",
    "WhatIf",
    "apply_changes",
    "calibrate",
    "configure",
    "fit_model",
    "measured_levels",
    "model_vs_measurement",
    "parse_change",
    "parse_slo",
    "plan",
    "plan_document",
    "whatif",
]
