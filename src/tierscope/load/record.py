"""Record a load run as a store run folder: the Python API behind ``tierscope load --out``.

Design decision: the generator does no file I/O and the store knows nothing of HTTP; this module
joins them the way the experiment runner does. Request rows are taken from the running generator
every half second and appended to ``requests.parquet`` as they come, so a long run keeps flat
memory; at the end the client's own samples go to ``metrics.parquet`` (tier ``client``), the
steady window to ``points.parquet``, the phases to ``events.parquet`` and the summary to
``run.json``. Ctrl-C stops the generator and closes the folder as ``partial`` with everything
measured so far.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import polars as pl

from tierscope.load._frames import CLIENT
from tierscope.load.generator import LoadGenerator, LoadHandle, LoadResult
from tierscope.store import RunWriter

#: Seconds between two hand-overs of request rows to the store.
STREAM_EVERY_S = 0.5


def _phases(handle: LoadHandle, end: float) -> pl.DataFrame:
    spans = [
        ("ramp-up", handle.t0, handle.steady_start),
        ("steady", handle.steady_start, handle.steady_end),
        ("ramp-down", handle.steady_end, handle.load_end),
    ]
    rows = [(a, min(b, end), name) for name, a, b in spans if b > a and a < end]
    return pl.DataFrame(
        {
            "t_start": [r[0] for r in rows],
            "t_end": [r[1] for r in rows],
            "kind": ["phase"] * len(rows),
            "tier": [CLIENT] * len(rows),
            "detail": [r[2] for r in rows],
        },
        schema={"t_start": pl.Float64, "t_end": pl.Float64, "kind": pl.String,
                "tier": pl.String, "detail": pl.String},
    )  # fmt: skip


def record_load(
    generator: LoadGenerator,
    run_dir: str | os.PathLike[str],
    *,
    level: float | None = None,
    ramp_up_s: float = 0.0,
    steady_s: float = 10.0,
    ramp_down_s: float = 0.0,
    options: dict[str, Any] | None = None,
    on_progress: Callable[[LoadHandle], None] | None = None,
) -> LoadResult:
    """Run one load level and write the run folder ``run_dir`` (new or empty).

    ``on_progress(handle)`` is called about every half second (for a progress view).
    ``options`` are recorded in ``run.json``. Bad input raises before the folder is created.
    """
    spec = generator.workload.model_dump(mode="json", exclude_none=True)
    handle = generator.start(level, ramp_up_s, steady_s, ramp_down_s)
    try:
        run = RunWriter.create(
            run_dir, kind="load", spec=spec, seed=generator.seed, options=options or {}
        )
    except BaseException:
        handle.stop()
        raise
    result: LoadResult | None = None
    streamed = 0
    with run:
        try:
            while not handle.join(STREAM_EVERY_S):
                rows = handle.take_requests()
                streamed += rows.height
                run.append("requests", rows)
                if on_progress is not None:
                    on_progress(handle)
            result = handle.wait()
        except BaseException:
            result = handle.stop()
            raise
        finally:
            if result is not None:
                # With keep_requests the result repeats the rows already streamed.
                keep = generator.keep_requests
                rest = result.requests.slice(streamed) if keep else result.requests
                _write_rest(run, handle, result, rest)
    assert result is not None
    return result


def _write_rest(
    run: RunWriter, handle: LoadHandle, result: LoadResult, requests: pl.DataFrame
) -> None:
    run.append("requests", requests)
    run.append("metrics", result.client_metrics())
    point = result.point()
    run.write("points", pl.DataFrame([point]))
    end = result.summary["steady"]["end"] if result.partial else handle.load_end
    run.write("events", _phases(handle, max(end, handle.t0)))
    run.info["summary"] = result.summary
