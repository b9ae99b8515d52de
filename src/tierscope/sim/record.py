"""Record a simulation as a run folder: the Python API behind ``model simulate --trace``.

Design decision: the simulator's engine does no file I/O and the store knows nothing of
queueing (it imports nothing above it); this module, above both, joins them the way the
experiment runner joins measurements and the store. Engine
chunks are converted by :mod:`tierscope.sim.trace` and appended as they arrive, so a long traced
run keeps flat memory; the model's perturbations become ``events.parquet`` (ground truth), the
steady-state summary of every replication ``points.parquet``, and the summary document is kept
in ``run.json`` under ``summary``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from tierscope.errors import InputError
from tierscope.sim import trace
from tierscope.sim.runner import SimResult, simulate
from tierscope.spec.experiment import MonitorSpec, PhasesSpec
from tierscope.spec.model import Model
from tierscope.spec.runs import SimulatedSetup, SimulatedSweep, SimulatedSweepSpec, SimulatedSystem
from tierscope.store import RunWriter


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


def record_simulated_sweep(
    setups: Mapping[str, Model],
    run_dir: str | os.PathLike[str],
    *,
    levels: Sequence[float],
    steady: float,
    ramp_up: float = 2.0,
    repetitions: int = 1,
    window: float = 0.05,
    seed: int = 1,
    plus_one_of: Mapping[str, str] | None = None,
) -> None:
    """Simulate a load sweep of one or several setups and write it as ONE run folder.

    Each (setup, level, rep) is simulated for ``ramp_up + steady`` seconds with every class's
    load set to the level (the population of a closed class, the arrival rate of an open one)
    and placed after the previous one on the run's single time base, as the experiment runner
    places its levels; ``events.parquet`` holds the ``phase`` rows (detail: JSON with setup,
    level, rep and phase) and the perturbations, ``points.parquet`` the steady windows.
    ``plus_one_of`` maps a setup to the base setup it adds one node to (for the margin M).
    """
    if not setups or not levels:
        raise InputError("setups/levels", None, "at least one setup and one level")
    modes = {c.is_open for m in setups.values() for c in m.classes}
    spec = SimulatedSweepSpec(
        system=SimulatedSystem(tiers={s.name: {} for s in next(iter(setups.values())).stations}),
        workload={"mode": "open" if modes == {True} else "closed"},
        sweep=SimulatedSweep(
            levels=[float(v) for v in levels],
            repetitions=repetitions,
            setups=[
                SimulatedSetup(name=name, plus_one_of=(plus_one_of or {}).get(name))
                for name in setups
            ],
        ),
        phases=PhasesSpec(ramp_up=ramp_up, steady=steady, ramp_down=0.0),
        monitor=MonitorSpec(interval=window),
        models=dict(setups),
    ).model_dump(mode="json", by_alias=True, exclude_none=True)
    run = RunWriter.create(run_dir, kind="simulated-sweep", spec=spec, seed=seed)
    offset = 0.0
    events: list[pl.DataFrame] = []
    points: list[pl.DataFrame] = []
    with run:
        for name, model in setups.items():
            for level in levels:
                for rep in range(repetitions):
                    length = ramp_up + steady
                    shifted = model.model_copy(
                        update={"classes": [_at_level(c, float(level)) for c in model.classes]}
                    )
                    layout = trace.Layout.of(shifted)
                    met: list[pl.DataFrame] = []
                    req: list[pl.DataFrame] = []

                    def on_chunk(
                        _r: int,
                        out: dict[str, Any],
                        met=met,
                        req=req,
                        layout=layout,
                        level=level,
                        rep=rep,
                        name=name,
                        offset=offset,
                    ) -> None:
                        m = trace.metrics_frame(
                            out["windows"],
                            layout,
                            width=float(out["window"]),
                            rep=rep,
                            setup=name,
                            level=float(level),
                        )
                        met.append(m.with_columns(pl.col("t") + offset))
                        if "trace" in out:
                            r = trace.requests_frame(
                                out["trace"], layout, rep=rep, setup=name, level=float(level)
                            )
                            req.append(
                                r.with_columns(
                                    pl.col("start") + offset,
                                    pl.col("end") + offset,
                                    pl.col("service_start") + offset,
                                    pl.concat_str(
                                        pl.lit(f"{name}-{level:g}-"), pl.col("request_id")
                                    ),
                                )
                            )

                    simulate(
                        shifted,
                        seed=seed + rep,
                        trace=True,
                        on_chunk=on_chunk,
                        max_time=length,
                        precision=1e-9,
                        window=window,
                    )
                    metrics = pl.concat(met).filter(pl.col("t") < offset + length)
                    requests = pl.concat(req) if req else None
                    run.append("metrics", metrics)
                    if requests is not None:
                        run.append("requests", requests)
                    points.append(
                        trace.points_frame(
                            metrics,
                            requests,
                            width=window,
                            warmup=offset + ramp_up,
                            stations=layout.stations,
                        )
                    )
                    phase = {"setup": name, "level": float(level), "rep": rep}
                    events.append(
                        pl.DataFrame(
                            [
                                {
                                    "t_start": offset,
                                    "t_end": offset + ramp_up,
                                    "kind": "phase",
                                    "tier": None,
                                    "detail": json.dumps(phase | {"phase": "ramp_up"}),
                                },
                                {
                                    "t_start": offset + ramp_up,
                                    "t_end": offset + length,
                                    "kind": "phase",
                                    "tier": None,
                                    "detail": json.dumps(phase | {"phase": "steady"}),
                                },
                            ],
                            schema=trace.EVENTS_SCHEMA,
                        )
                    )
                    faults = trace.events_frame(shifted, end=length)
                    if faults.height:
                        events.append(
                            faults.with_columns(
                                pl.col("t_start") + offset, pl.col("t_end") + offset
                            )
                        )
                    offset += length
        run.write("events", pl.concat(events).sort("t_start"))
        run.write("points", pl.concat(points, how="diagonal_relaxed"))


def _at_level(c: Any, level: float) -> Any:
    if c.is_open:
        return c.model_copy(update={"arrival_rate": level})
    return c.model_copy(update={"population": round(level)})
