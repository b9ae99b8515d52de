"""The sweep: deploy each setup, drive every level, monitor every tier, write the store.

Design decisions:

* **One time base.** ``t0`` is taken on CLOCK_MONOTONIC when the run starts; the load
  generator, the tiers' request logs, the monitor and the fault scheduler all stamp
  CLOCK_MONOTONIC, and everything is stored as seconds since ``t0``.
* **Nothing measured is lost.** Each level's rows are appended and flushed to disk as soon as the
  level ends (``RunWriter.flush``), so an interrupted or killed run keeps every completed level
  (``run.json`` says ``partial``); Ctrl-C/SIGTERM stops the load, continues stalled servers,
  stops every process (the reaper covers a SIGKILL) and closes the store as ``partial``.
* **The client is measured like a tier.** Every level records the load generator's CPU and timer
  lag (tier ``client``), and the summary warns when the client was, or came close to being, the
  bottleneck.
* Points (throughput and response times of the steady window) are computed here from the client's
  per-request records, so they mean the same for every workload mode.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tierscope.errors import InputError
from tierscope.experiment.cgroups import CgroupUnavailableError, Hierarchy, open_hierarchy
from tierscope.experiment.faults import FaultScheduler, FaultTarget, Occurrence
from tierscope.experiment.monitor import Monitor, NodeProbe
from tierscope.experiment.processes import Supervisor
from tierscope.experiment.targets import Deployment, start_system
from tierscope.spec.experiment import ExperimentSpec, setup_specs
from tierscope.store import RunWriter

Progress = Callable[[dict[str, Any]], None]
PROGRESS_EVERY_S = 0.25
#: Per-tier aggregates in points: metrics averaged over a tier's nodes (fractions); all other
#: metrics are summed over nodes (cores, queue lengths, rates are additive).
MEAN_OVER_NODES = ("cpu_util", "cpu_throttled_ratio", "worker_util", "pool_util")


@dataclass
class LevelOutcome:
    setup: str
    level: float
    rep: int
    point: dict[str, Any]
    client: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


class Runner:
    """Runs one experiment spec into one run folder; :meth:`run` returns the summary."""

    def __init__(
        self,
        spec: ExperimentSpec,
        doc: dict[str, Any],
        out_dir: Path,
        *,
        source: str = "<spec>",
        progress: Progress | None = None,
    ) -> None:
        self.spec = spec
        self.doc = doc
        self.out_dir = Path(out_dir)
        self.source = source
        self.progress = progress or (lambda _state: None)
        self.setups = setup_specs(spec, doc, source=source)
        self.outcomes: list[LevelOutcome] = []
        self.monitor_stats: list[dict[str, Any]] = []
        self.t0 = 0.0

    # ---- the whole run -------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        import tierscope.load  # noqa: F401  (fail before deploying anything if it is missing)

        run_id = uuid.uuid4().hex[:8]
        hierarchy = self._cgroups(run_id)
        writer = RunWriter.create(
            self.out_dir,
            kind="experiment",
            spec=self.doc,
            seed=self.spec.system.seed,
            options={"source": self.source, "setups": list(self.setups)},
        )
        workdir = Path(tempfile.mkdtemp(prefix=f"tierscope-{run_id}-"))
        supervisor = Supervisor(workdir)
        supervisor.start_reaper()
        if hierarchy is not None:
            supervisor.note_paths(*hierarchy.roots.values())
        self.t0 = time.monotonic()
        writer.info["cgroup"] = hierarchy.version if hierarchy else None
        writer.info["time_base"] = "seconds since the run's start (CLOCK_MONOTONIC)"
        try:
            with writer:
                for name, setup in self.setups.items():
                    setup_dir = workdir / name
                    setup_dir.mkdir()
                    self._run_setup(name, setup, writer, setup_dir, supervisor, hierarchy)
                writer.info["summary"] = self.summary()
        finally:
            supervisor.stop_all()
            if hierarchy is not None:
                hierarchy.remove()
            supervisor.close()
            shutil.rmtree(workdir, ignore_errors=True)
        return {**self.summary(), "status": writer.info["status"]}

    def _cgroups(self, run_id: str) -> Hierarchy | None:
        needed = [
            f"system.tiers.{tier}.{key}"
            for s in self.setups.values()
            for tier, t in s.system.tiers.items()
            for key in ("cpu", "cpuset", "memory")
            if getattr(t, key) is not None
        ]
        try:
            return open_hierarchy(f"tierscope-{run_id}")
        except CgroupUnavailableError as exc:
            if needed:
                raise InputError(
                    needed[0],
                    "set",
                    f"a host where cgroups can be written: {exc}",
                    source=self.source,
                ) from None
            return None

    # ---- one setup -----------------------------------------------------------------------------
    def _run_setup(
        self,
        name: str,
        spec: ExperimentSpec,
        writer: RunWriter,
        workdir: Path,
        supervisor: Supervisor,
        hierarchy: Hierarchy | None,
    ) -> None:
        from tierscope.load import LoadGenerator
        from tierscope.spec.workload import parse_workload

        self.progress({"event": "deploy", "setup": name})
        t_deploy = time.monotonic()
        deployment = start_system(spec.system, workdir, supervisor, hierarchy)
        deployed = [(t_deploy, time.monotonic(), "deploy", "", {"setup": name, **deployment.facts})]
        writer.append("events", self._events(deployed))
        workload = parse_workload(
            merged_workload(deployment.workload, spec.workload), source=f"{self.source}: workload"
        )
        generator = LoadGenerator(workload, deployment.entry_urls, seed=spec.system.seed)
        live: dict[str, Any] = {"handle": None}

        def client_sample() -> dict[str, float] | None:
            handle = live["handle"]
            if handle is None:
                return None
            snap = handle.snapshot()
            return {"cpu_cores": float(snap.client_cpu), "lag_s": float(snap.lag_s)}

        probes = [
            NodeProbe(
                tier=n.tier,
                node=n.name,
                cgroup=n.cgroup,
                pids=n.pids if n.cgroup is None else None,
                quota_cores=n.quota,
                gauges=n.gauges,
                extra=n.extra_metrics,
            )
            for n in deployment.nodes
        ]
        monitor = Monitor(spec.monitor.interval, self.t0, probes, client=client_sample).start()
        try:
            for level in spec.sweep.level_values:
                for rep in range(spec.sweep.repetitions):
                    outcome = self._run_level(
                        name,
                        spec,
                        level,
                        rep,
                        deployment,
                        generator,
                        monitor,
                        writer,
                        live,
                        supervisor,
                    )
                    self.outcomes.append(outcome)
                    self.progress({"event": "level_done", "outcome": outcome})
        finally:
            monitor.stop()
            self.monitor_stats.append(
                {
                    "setup": name,
                    "interval_s": spec.monitor.interval,
                    "overhead_cores": monitor.overhead,
                    "ticks": monitor.ticks,
                    "late_ticks": monitor.late_ticks,
                }
            )
            deployment.stop()
            if hierarchy is not None:
                for node in deployment.nodes:
                    if node.cgroup is not None:
                        node.cgroup.destroy()
                hierarchy.nodes.clear()
            writer.flush()

    # ---- one level -----------------------------------------------------------------------------
    def _run_level(
        self,
        setup: str,
        spec: ExperimentSpec,
        level: float,
        rep: int,
        deployment: Deployment,
        generator: Any,
        monitor: Monitor,
        writer: RunWriter,
        live: dict[str, Any],
        supervisor: Supervisor,
    ) -> LevelOutcome:
        ph = spec.phases
        # What was sampled or finished between levels belongs to no level.
        monitor.drain()
        for node in deployment.nodes:
            for source in node.request_sources:
                source()
        targets = [
            FaultTarget(n.tier, n.name, n.replica, n.pids, n.cgroup) for n in deployment.nodes
        ]
        t_level = time.monotonic()
        faults = FaultScheduler(spec.faults, targets, ph.total).start(t_level)
        handle = generator.start(level, ph.ramp_up, ph.steady, ph.ramp_down)
        live["handle"] = handle
        result = None
        try:
            while not handle.done():
                time.sleep(PROGRESS_EVERY_S)
                supervisor.check_alive()
                self.progress(
                    {
                        "event": "tick",
                        "setup": setup,
                        "level": level,
                        "rep": rep,
                        "snapshot": handle.snapshot(),
                        "tiers": dict(monitor.latest),
                    }
                )
            result = handle.wait()
        finally:
            # Whatever happened, keep what this level measured.
            measured = result
            if measured is None:
                with contextlib.suppress(Exception):
                    measured = handle.stop()
            occurred = faults.stop()
            live["handle"] = None
            tag = (setup, level, rep)
            if measured is not None:
                writer.append("requests", client_requests(measured.requests, self.t0, *tag))
            metrics = label(monitor.drain(), *tag)
            writer.append("metrics", metrics)
            for node in deployment.nodes:
                for source in node.request_sources:
                    writer.append(
                        "requests", tier_requests(source(), node.tier, node.name, self.t0, *tag)
                    )
            writer.append("events", self._events(self._fault_rows(occurred, *tag)))
            writer.flush()
        rel = t_level - self.t0
        steady = (rel + ph.ramp_up, rel + ph.ramp_up + ph.steady)
        phases = [
            (t_level, t_level + ph.ramp_up, "ramp_up"),
            (t_level + ph.ramp_up, t_level + ph.ramp_up + ph.steady, "steady"),
            (t_level + ph.ramp_up + ph.steady, time.monotonic(), "ramp_down"),
        ]
        writer.append(
            "events",
            self._events(
                (a, b, "phase", "", {"setup": setup, "level": level, "rep": rep, "phase": p})
                for a, b, p in phases
            ),
        )
        client = client_requests(result.requests, self.t0, setup, level, rep)
        point = point_row(client, metrics, setup, level, rep, steady)
        writer.append("points", pl.DataFrame([point]))
        writer.flush()
        summary = dict(result.summary)
        return LevelOutcome(
            setup, level, rep, point, summary, client_warnings(point, spec, setup, level)
        )

    def _fault_rows(self, occurred: list[Occurrence], setup: str, level: float, rep: int):
        for o in occurred:
            detail = {"node": o.node, "setup": setup, "level": level, "rep": rep, **o.detail}
            yield (o.t_start, o.t_end, o.kind, o.tier, detail)

    def _events(
        self, rows: Iterable[tuple[float, float, str, str, dict[str, Any]]]
    ) -> pl.DataFrame:
        """Event rows with monotonic times -> the store's events table (run time)."""
        data = [
            {
                "t_start": a - self.t0,
                "t_end": b - self.t0,
                "kind": kind,
                "tier": tier,
                "detail": json.dumps(detail, sort_keys=True),
            }
            for a, b, kind, tier, detail in rows
        ]
        schema = {
            "t_start": pl.Float64,
            "t_end": pl.Float64,
            "kind": pl.String,
            "tier": pl.String,
            "detail": pl.String,
        }
        return pl.DataFrame(data, schema=schema)

    # ---- summary -------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        points = [o.point for o in self.outcomes]
        return {
            "run_dir": str(self.out_dir),
            "points": points,
            "utilisation": utilisation_summary(points),
            "warnings": [w for o in self.outcomes for w in o.warnings],
            "monitor": self.monitor_stats,
        }


# ---- table conversion ----------------------------------------------------------------------------
def merged_workload(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The system's base workload with the spec's ``workload`` section merged over it
    (mappings merge key by key; ``think_time`` and lists are replaced as a whole)."""
    out = json.loads(json.dumps(base))
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "think_time":
            out[key] = merged_workload(out[key], value)
        else:
            out[key] = value
    return out


#: Columns the runner keeps in requests.parquet after the contract ones, same for every tier
#: (null where a tier has no such value), so all parts of the table share one schema.
REQUEST_EXTRAS: dict[str, pl.DataType] = {
    "node": pl.String(),
    "detail": pl.String(),
    "intended_start": pl.Float64(),
    "actual_start": pl.Float64(),
    "bytes": pl.Int64(),
    "phase": pl.String(),
    "error": pl.String(),
}


def _with_extras(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(
        *(
            (pl.col(c) if c in frame.columns else pl.lit(None)).cast(t).alias(c)
            for c, t in REQUEST_EXTRAS.items()
        )
    ).select(*[c for c in frame.columns if c not in REQUEST_EXTRAS], *REQUEST_EXTRAS)


def label(frame: pl.DataFrame, setup: str, level: float, rep: int) -> pl.DataFrame:
    return frame.with_columns(
        pl.lit(setup).alias("setup"), pl.lit(float(level)).alias("level"), pl.lit(rep).alias("rep")
    )


def client_requests(
    frame: pl.DataFrame, t0: float, setup: str, level: float, rep: int
) -> pl.DataFrame:
    """The load generator's records (monotonic seconds) in the store's time base, tier client."""
    shift = [c for c in ("start", "end", "intended_start", "actual_start") if c in frame.columns]
    out = frame.with_columns(*(pl.col(c) - t0 for c in shift), pl.lit("client").alias("tier"))
    return _with_extras(label(out, setup, level, rep))


def tier_requests(
    frame: pl.DataFrame, tier: str, node: str, t0: float, setup: str, level: float, rep: int
) -> pl.DataFrame:
    out = frame.with_columns(
        pl.col("start") - t0,
        pl.col("end") - t0,
        pl.lit(tier).alias("tier"),
        pl.lit(node).alias("node"),
    )
    return _with_extras(label(out, setup, level, rep))


def point_row(
    client: pl.DataFrame,
    metrics: pl.DataFrame,
    setup: str,
    level: float,
    rep: int,
    steady: tuple[float, float],
) -> dict[str, Any]:
    """Steady-window throughput (successful requests ending in it per second), response-time
    mean and percentiles, errors, and per-tier means of every metric."""
    a, b = steady
    done = client.filter((pl.col("end") >= a) & (pl.col("end") < b))
    ok = done.filter(pl.col("status") == "ok")
    rt = (ok["end"] - ok["start"]).to_numpy() if ok.height else np.array([])
    row: dict[str, Any] = {
        "setup": setup,
        "level": float(level),
        "rep": rep,
        "t_start": a,
        "t_end": b,
        "throughput": ok.height / (b - a),
        "rt_mean": float(rt.mean()) if rt.size else math.nan,
        "rt_p50": float(np.percentile(rt, 50)) if rt.size else math.nan,
        "rt_p95": float(np.percentile(rt, 95)) if rt.size else math.nan,
        "rt_p99": float(np.percentile(rt, 99)) if rt.size else math.nan,
        "errors": float(done.height - ok.height),
    }
    if metrics.height:
        window = metrics.filter((pl.col("t") >= a) & (pl.col("t") < b))
        per_node = window.group_by("tier", "node", "metric").agg(pl.col("value").mean())
        per_tier = per_node.group_by("tier", "metric").agg(
            pl.col("value").mean().alias("mean"), pl.col("value").sum().alias("sum")
        )
        for r in per_tier.sort("tier", "metric").iter_rows(named=True):
            value = (
                r["mean"]
                if r["metric"] in MEAN_OVER_NODES or r["tier"] in ("client", "host")
                else r["sum"]
            )
            row[f"{r['tier']}.{r['metric']}"] = float(value)
    return row


def utilisation_summary(points: list[dict[str, Any]], busy: float = 0.85) -> list[dict[str, Any]]:
    """Per setup: the peak throughput, each tier's CPU utilisation (of its quota) at the highest
    level, and the tier that was busiest there when it exceeds ``busy`` — the plain summary the
    run prints; ``tierscope analyze`` does the full bottleneck analysis."""
    out = []
    for setup in dict.fromkeys(p["setup"] for p in points):
        rows = [p for p in points if p["setup"] == setup]
        peak = max(rows, key=lambda p: p["throughput"])
        top = max(rows, key=lambda p: p["level"])
        util = {t: top[f"{t}.cpu_util"] for t in ("web", "app", "db") if f"{t}.cpu_util" in top}
        busiest = max(util, key=lambda t: util[t]) if util else None
        out.append(
            {
                "setup": setup,
                "peak_level": peak["level"],
                "peak_throughput": peak["throughput"],
                "top_level": top["level"],
                "cpu_util_at_top_level": util,
                "bottleneck_tier": busiest if busiest and util[busiest] >= busy else None,
            }
        )
    return out


def client_warnings(
    point: dict[str, Any], spec: ExperimentSpec, setup: str, level: float
) -> list[str]:
    """Say when the load generator itself was (nearly) the bottleneck at this level."""
    out = []
    cpu = point.get("client.cpu_cores", 0.0)
    lag = point.get("client.lag_s", 0.0)
    if cpu > spec.client.max_cpu:
        out.append(
            f"setup {setup}, level {level:g}: the load generator used {cpu:.2f} cores "
            f"(limit {spec.client.max_cpu:g}); the client may be the bottleneck"
        )
    if lag > spec.client.max_lag_s:
        out.append(
            f"setup {setup}, level {level:g}: the load generator's timers lagged "
            f"{lag * 1e3:.1f} ms on average (limit {spec.client.max_lag_s * 1e3:g} ms); "
            "requests left late"
        )
    return out


def run_experiment(
    spec: ExperimentSpec,
    doc: dict[str, Any],
    out_dir: Path,
    *,
    source: str = "<spec>",
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run ``spec`` into ``out_dir`` (new or empty); returns the run summary."""
    return Runner(spec, doc, out_dir, source=source, progress=progress).run()
