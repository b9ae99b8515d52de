"""Python face of the native discrete-event simulator.

``simulate(model, ...)`` compiles a model file into the engine's spec, runs independent
replications in threads until the requested precision is reached and returns the analytic result
shape plus confidence intervals (``ci``) and run statistics (``stats``).
"""

from __future__ import annotations

from tierscope.sim.runner import SimResult, simulate

__all__ = ["SimResult", "simulate"]
