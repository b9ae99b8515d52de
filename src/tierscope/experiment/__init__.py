"""The experiment runner: deploy a system, sweep the load, monitor every tier, write the store.

``run_experiment(spec, doc, out_dir)`` is the Python face of ``tierscope run``; the pieces are
:mod:`.targets` (the embedded bulletin board and the nginx/PostgreSQL webstack),
:mod:`.cgroups` (node emulation), :mod:`.monitor` (50 ms sampling), :mod:`.faults` (stalls,
competing CPU load), :mod:`.processes` (starting and always stopping servers) and
:mod:`.runner` (the sweep itself).

Imports are lazy: the embedded tiers run as ``python -m tierscope.experiment.embedded.<tier>``
and must not pay for numpy and polars at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The spec ``tierscope demo`` runs (a copy is ``examples/demo.yaml``).
DEMO_SPEC = Path(__file__).with_name("demo.yaml")
#: ``tierscope demo --quick``: fewer, shorter levels that still cross the saturation point.
QUICK_OVERRIDES = (
    "sweep.levels=[10, 40, 80, 120]",
    "phases.ramp_up=2",
    "phases.steady=8",
    "phases.ramp_down=1",
)


def __getattr__(name: str) -> Any:
    if name in ("LevelOutcome", "Runner", "run_experiment"):
        from tierscope.experiment import runner

        return getattr(runner, name)
    raise AttributeError(name)


__all__ = ["DEMO_SPEC", "QUICK_OVERRIDES", "LevelOutcome", "Runner", "run_experiment"]
