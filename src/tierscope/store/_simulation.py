"""Record a simulation as a run folder: the Python API behind ``model simulate --trace``.

Design decision: the simulator does no file I/O and the store knows nothing of queueing; this
module joins them the way the experiment runner will join measurements and the store. Engine
chunks are converted by :mod:`tierscope.sim.trace` and appended as they arrive, so a long traced
run keeps flat memory; the model's perturbations become ``events.parquet`` (ground truth), the
steady-state summary of every replication ``points.parquet``, and the summary document is kept
in ``run.json`` under ``summary``.
"""

from __future__ import annotations

import os
from typing import Any

from tierscope.errors import InputError
from tierscope.sim import trace
from tierscope.sim.runner import SimResult, simulate
from tierscope.spec.model import Model
from tierscope.store._run import RunWriter


def record_simulation(
    model: Model,
    run_dir: str | os.PathLike[str],
    *,
    seed: int = 1,
    source: str | None = None,
    **options: Any,
) -> SimResult:
    """Simulate ``model`` with per-request traces and write the run folder ``run_dir``.

    ``options`` are those of :func:`tierscope.sim.simulate` (precision, max_time, window, ...);
    ``source`` (e.g. the model file) is recorded in ``run.json``. ``run_dir`` must be new or
    empty. Returns the summary. A run refused for bad input before anything was measured leaves
    no folder behind.
    """
    spec = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    layout = trace.Layout.of(model)
    seen = {"now": 0.0, "chunks": 0}
    recorded = {**options, "trace": True, "source": source}
    run = RunWriter.create(run_dir, kind="simulation", spec=spec, seed=seed, options=recorded)

    def on_chunk(rep: int, out: dict[str, Any]) -> None:
        seen["now"] = max(seen["now"], float(out["now"]))  # simulated, whatever is written
        seen["chunks"] += 1
        width = float(out["window"])
        run.append("metrics", trace.metrics_frame(out["windows"], layout, width=width, rep=rep))
        if "trace" in out:
            run.append("requests", trace.requests_frame(out["trace"], layout, rep=rep))

    with run:
        try:
            result = simulate(model, seed=seed, trace=True, on_chunk=on_chunk, **options)
        except BaseException as exc:
            if isinstance(exc, InputError) and seen["chunks"] == 0:
                run.discard()  # refused before anything was measured: leave nothing behind
            else:
                run.write("events", trace.events_frame(model, end=seen["now"]))
            raise
        run.write("events", trace.events_frame(model, end=seen["now"]))
        run.finish("metrics")
        run.finish("requests")
        run.write(
            "points",
            trace.points_frame(
                run.scan("metrics"),
                run.scan("requests"),
                width=float(result.stats["window"]),
                warmup=float(result.stats["warmup_time"]),
                stations=layout.stations,
            ),
        )
        run.info["summary"] = result.to_dict()
    return result
