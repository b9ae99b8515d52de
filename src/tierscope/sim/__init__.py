"""Python face of the native discrete-event simulator.

``simulate(model, ...)`` compiles a model file into the engine's spec, runs independent
replications in threads until the requested precision is reached and returns the analytic result
shape plus confidence intervals (``ci``) and run statistics (``stats``);
``record_simulation`` / ``record_simulated_sweep`` write a traced simulation or a simulated
load sweep as a run folder through the store.
"""

from __future__ import annotations

from tierscope.sim.record import record_simulated_sweep, record_simulation
from tierscope.sim.runner import SimResult, simulate

__all__ = ["SimResult", "record_simulated_sweep", "record_simulation", "simulate"]
