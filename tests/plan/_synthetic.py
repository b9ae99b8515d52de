"""A simulated sweep of an n-tier system written as a *measured* run folder.

The quota-aware simulator plays the system (known demands, quotas, think time, outside delay)
and every table is written in the runner's format (docs/experiments.md): client and nested
per-tier request records joined by request id, 50 ms ``cpu_cores`` per node, points with
steady-window ``tier.metric`` aggregates, the resolved spec in run.json. Calibration and
planning tests read it like a real run and must recover the truth they were given.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tierscope.sim.twin import SimTier, simulate_closed
from tierscope.store import RunWriter

TIERS = ("web", "app", "db")


def write_sweep(
    out: Path,
    *,
    levels: Sequence[int],
    cpu: dict[str, float | None],
    demands: dict[str, float],
    topology: str = "1/1/1",
    think: float = 0.5,
    delay: float = 0.0005,
    ramp: float = 3.0,
    steady: float = 30.0,
    samples: np.ndarray | None = None,
    write_fraction: np.ndarray | None = None,
    contention: dict[str, float] | None = None,
    seed: int = 1,
) -> dict[str, Any]:
    """Simulate every level and write the run folder ``out``; returns the spec document.
    ``contention``: per tier, the CPU a request burns grows by this fraction with each other
    request present (without bound)."""
    replicas = dict(zip(TIERS, (int(p) for p in topology.split("/")), strict=True))
    doc = {
        "name": "synthetic",
        "system": {
            "kind": "embedded",
            "topology": topology,
            "tiers": {t: {"cpu": c} for t, c in cpu.items() if c is not None},
        },
        "workload": {"mode": "closed", "think_time": {"dist": "exp", "mean": think}},
        "sweep": {"levels": list(levels)},
        "phases": {"ramp_up": ramp, "steady": steady, "ramp_down": 0.0},
    }
    # processes per replica as the runner sets them (enough for the quota); Python tiers serve
    # round robin with the GIL's 5 ms slice; writes run at every database replica
    procs = {t: float(max(1, np.ceil(cpu.get(t) or 1))) for t in TIERS}
    contention = contention or {}
    tiers = [
        SimTier(
            t,
            replicas[t],
            procs[t],
            cpu.get(t),
            write_all=t == "db",
            quantum=0.005,
            contention=contention.get(t, 0.0),
            contention_upto=np.inf,
        )
        for t in TIERS
    ]
    means = np.array([demands[t] for t in TIERS])
    writer = RunWriter.create(out, kind="experiment", spec=doc, seed=seed)
    with writer:
        offset = 0.0
        for i, level in enumerate(levels):
            res = simulate_closed(
                tiers,
                users=int(level),
                think_time=think,
                demand_means=means,
                demand_samples=samples,
                write_fraction=write_fraction,
                delay=delay,
                warmup=ramp,
                duration=steady,
                seed=seed + i,
                trace=True,
            )
            assert res.trace is not None
            _write_level(writer, res.trace, float(level), offset, ramp, steady, replicas)
            offset += ramp + steady + 1.0
    return doc


def _write_level(
    writer: RunWriter,
    trace: Any,
    level: float,
    offset: float,
    ramp: float,
    steady: float,
    replicas: dict[str, int],
) -> None:
    tag = {"setup": "s0", "level": level, "rep": 0}
    req = pl.DataFrame(trace.requests, schema=["uid", "start", "end"], orient="row")
    vis = pl.DataFrame(
        trace.visits, schema=["uid", "tier", "replica", "start", "end", "write"], orient="row"
    )
    rid = pl.concat_str(pl.lit(f"L{level:g}-"), pl.col("uid").cast(pl.String))
    client = req.select(
        pl.lit("client").alias("tier"),
        rid.alias("request_id"),
        (pl.col("start") + offset).alias("start"),
        (pl.col("end") + offset).alias("end"),
        *[pl.lit(v).alias(k) for k, v in tag.items()],
        pl.lit("page").alias("interaction"),
        pl.lit("ok").alias("status"),
        pl.lit(None, pl.String).alias("node"),
    )
    # nested tier rows: a tier's record lasts until the request leaves the last tier it uses
    last_end = vis.group_by("uid").agg(pl.col("end").max().alias("leave"))
    vis = vis.join(last_end, on="uid").with_columns(
        pl.when(pl.col("tier") == len(TIERS) - 1)
        .then(pl.col("end"))
        .otherwise(pl.col("leave"))
        .alias("row_end")
    )
    tiers = pl.Series(TIERS)
    rows = vis.select(
        pl.col("tier").map_elements(lambda k: TIERS[k], return_dtype=pl.String).alias("tier"),
        rid.alias("request_id"),
        (pl.col("start") + offset).alias("start"),
        (pl.col("row_end") + offset).alias("end"),
        *[pl.lit(v).alias(k) for k, v in tag.items()],
        pl.lit("page").alias("interaction"),
        pl.lit("ok").alias("status"),
        pl.concat_str(
            pl.col("tier").map_elements(lambda k: TIERS[k], return_dtype=pl.String),
            pl.lit("-"),
            (pl.col("replica") + 1).cast(pl.String),
        ).alias("node"),
        # the database tier's query name: a write runs at every replica under the same name
        pl.when(pl.col("write")).then(pl.lit("insert")).otherwise(pl.lit("select")).alias("detail"),
    )
    client = client.with_columns(pl.lit(None, pl.String).alias("detail"))
    del tiers
    writer.append("requests", pl.concat([client, rows]))
    cpu = pl.DataFrame(trace.cpu, schema=["tier", "replica", "t", "cores"], orient="row")
    tier_name = pl.col("tier").map_elements(lambda k: TIERS[k], return_dtype=pl.String)
    node = pl.concat_str(tier_name, pl.lit("-"), (pl.col("replica") + 1).cast(pl.String))
    metrics = cpu.select(
        (pl.col("t") + offset).alias("t"),
        *[pl.lit(v).alias(k) for k, v in tag.items()],
        tier_name.alias("tier"),
        node.alias("node"),
        pl.lit("cpu_cores").alias("metric"),
        pl.col("cores").alias("value"),
    )
    writer.append("metrics", metrics)
    a, b = offset + ramp, offset + ramp + steady
    done = client.filter((pl.col("end") >= a) & (pl.col("end") < b))
    rt = (done["end"] - done["start"]).to_numpy()
    window = metrics.filter((pl.col("t") > a) & (pl.col("t") <= b))
    point: dict[str, Any] = {
        **tag,
        "t_start": a,
        "t_end": b,
        "throughput": done.height / steady,
        "rt_mean": float(rt.mean()),
        "rt_p50": float(np.percentile(rt, 50)),
        "rt_p95": float(np.percentile(rt, 95)),
        "rt_p99": float(np.percentile(rt, 99)),
        "errors": 0.0,
    }
    per_node = window.group_by("tier", "node").agg(pl.col("value").mean())
    for k, t in enumerate(TIERS):
        point[f"{t}.cpu_cores"] = float(per_node.filter(pl.col("tier") == t)["value"].sum())
        # requests present at the tier's replicas together, averaged over the window
        stays = vis.filter(pl.col("tier") == k)
        inside = (stays["end"] + offset).clip(a, b) - (stays["start"] + offset).clip(a, b)
        point[f"{t}.queue_length"] = float(inside.sum()) / steady
    writer.append("points", pl.DataFrame([point]))
    writer.flush()
    del replicas
