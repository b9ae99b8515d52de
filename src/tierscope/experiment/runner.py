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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tierscope.errors import InputError, SpecError
from tierscope.experiment.cgroups import CgroupUnavailableError, Hierarchy, open_hierarchy
from tierscope.experiment.faults import FaultScheduler, FaultTarget, Occurrence
from tierscope.experiment.leftovers import Removed, RunClaim, claim_run
from tierscope.experiment.monitor import Monitor, NodeProbe
from tierscope.experiment.netem import require_emulator
from tierscope.experiment.processes import Supervisor
from tierscope.experiment.targets import (
    Deployment,
    Node,
    Scaled,
    deployed_as,
    skipped_records,
    start_system,
    target_for,
)
from tierscope.spec.experiment import ExperimentSpec, SystemSpec, check_host, setup_specs
from tierscope.store import RunWriter

Progress = Callable[[dict[str, Any]], None]
#: Called with the deployment and each progress tick of a level (elastic control).
Control = Callable[[Deployment, dict[str, Any]], None]
PROGRESS_EVERY_S = 0.25
#: Per-tier aggregates in points: metrics averaged over a tier's nodes (fractions, and their
#: per-callee forms such as ``pool_util:<callee>``); all other metrics are summed over nodes
#: (cores, queue lengths, rates are additive).
MEAN_OVER_NODES = ("cpu_util", "cpu_throttled_ratio", "worker_util", "pool_util")


@dataclass(frozen=True)
class _RunContext:
    """What every deployment of one run writes to and is stopped by."""

    writer: RunWriter
    supervisor: Supervisor
    hierarchy: Hierarchy | None


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
        control: Control | None = None,
    ) -> None:
        self.spec = spec
        self.doc = doc
        self.out_dir = Path(out_dir)
        self.source = source
        self.progress = progress or (lambda _state: None)
        self.control = control
        self.setups = setup_specs(spec, doc, source=source)
        if spec.sweep.interleave:
            _check_interleavable(self.setups, source)
        self.outcomes: list[LevelOutcome] = []
        self.monitor_stats: list[dict[str, Any]] = []
        self.t0 = 0.0
        self.run_id = ""
        self.supervisor: Supervisor | None = None
        #: Said about the run as a whole (e.g. leftovers of killed runs removed), in the summary.
        self.notes: list[str] = []

    # ---- the whole run -------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        import tierscope.load  # noqa: F401  (fail before deploying anything if it is missing)

        run_id = uuid.uuid4().hex[:8]
        # What killed runs left behind goes first; this run's lock is held until its end.
        with claim_run(run_id) as claim:
            return self._run(run_id, claim)

    def _run(self, run_id: str, claim: RunClaim) -> dict[str, Any]:
        self.run_id = run_id
        for name, setup in self.setups.items():
            check_host(setup, source=self.source)  # limits the host cannot honour, by field
            where = "" if name == "s0" else f"setup {name}: "
            target = target_for(setup.system.kind)
            try:  # what the target cannot deploy here (an attached PID that is not running)
                target.check(setup.system)
            except SpecError as exc:
                raise SpecError(self.source, [(where + f, m) for f, m in exc.errors]) from None
            for i, f in enumerate(setup.faults):
                if f.kind not in target.faults:
                    raise SpecError(
                        self.source,
                        [(f"{where}faults[{i}].kind", f"the {target.kind} target injects "
                          f"{', '.join(sorted(target.faults))}, not {f.kind}")],
                    )  # fmt: skip
                if f.kind == "network":
                    require_emulator(f"{where}faults[{i}]")
        # The run folder is claimed (atomically) before anything is made, so a refused --out
        # leaves no cgroup behind.
        writer = RunWriter.create(
            self.out_dir,
            kind="experiment",
            spec=self.doc,
            seed=self.spec.system.seed,
            # run_id names the run's cgroups and scratch folder (tierscope-RUN_ID), for post-mortems
            options={"source": self.source, "setups": list(self.setups), "run_id": run_id},
            graph=self.spec.system.graph,
            interval=self.spec.monitor.interval,
        )
        try:
            hierarchy = self._cgroups(run_id)
        except BaseException:
            writer.discard()
            raise
        with _scratch(run_id, claim, hierarchy) as (workdir, supervisor):
            self.supervisor = supervisor
            self.t0 = time.monotonic()
            writer.info["cgroup"] = hierarchy.version if hierarchy else None
            writer.info["time_base"] = "seconds since the run's start (CLOCK_MONOTONIC)"
            with writer:
                self._report_leftovers(claim.removed, writer)
                ctx = _RunContext(writer, supervisor, hierarchy)
                if self.spec.sweep.interleave:
                    self._run_in_turn(self.setups, workdir, ctx)
                else:
                    for name, setup in self.setups.items():
                        setup_dir = workdir / name
                        setup_dir.mkdir()
                        self._run_in_turn({name: setup}, setup_dir, ctx)
                writer.info["summary"] = self.summary()
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

    def _report_leftovers(self, removed: list[Removed], writer: RunWriter) -> None:
        """Say what was removed of killed runs: events (kind ``cleanup``), summary, progress."""
        t = time.monotonic()
        rows = [(t, t, "cleanup", "", r.detail()) for r in removed]
        if rows:
            writer.append("events", events_frame(rows, self.t0))
        for r in removed:
            self.notes.append(r.message())
            self.progress({"event": "cleanup", "message": r.message()})

    # ---- setups on one deployment ---------------------------------------------------------------
    def _run_in_turn(
        self, setups: dict[str, ExperimentSpec], workdir: Path, ctx: _RunContext
    ) -> None:
        """Level i, repetition r of every setup, then level i, repetition r + 1, ...: the setups
        share one deployment and only their quotas are switched between levels, so that slow
        drift of the host (minutes) touches every setup alike. One setup: its sweep in order."""
        first = next(iter(setups.values()))
        with self._deployed("+".join(setups), first, workdir, ctx) as (dep, monitor):
            workloads = {name: self._workload(dep, s) for name, s in setups.items()}
            for name, workload in workloads.items():  # e.g. a database's records loaded
                t = time.monotonic()
                facts = dep.driver.prepare(workload)
                if facts:
                    row = (t, time.monotonic(), "prepare", "", {"setup": name, **facts})
                    ctx.writer.append("events", events_frame([row], self.t0))
            rounds = max(len(s.sweep.level_values) for s in setups.values())
            reps = max(s.sweep.repetitions for s in setups.values())
            for i in range(rounds):
                for rep in range(reps):
                    for name, s in setups.items():
                        levels = s.sweep.level_values
                        if i >= len(levels) or rep >= s.sweep.repetitions:
                            continue
                        self._set_quotas(name, s, dep, monitor, ctx.writer)
                        self._level(
                            name, s, i, levels[i], rep, dep, monitor, ctx.writer, workloads[name]
                        )

    def _set_quotas(
        self, name: str, spec: ExperimentSpec, dep: Deployment, monitor: Monitor, writer: RunWriter
    ) -> None:
        changed = {}
        graph = spec.system.graph
        for node in dep.nodes:
            quota = graph[node.tier].cpu if node.tier in graph else None
            if node.quota == quota or node.cgroup is None or node.adopted:
                continue  # an attached component's limit is its own (spec cpu: as told)
            node.cgroup.set_cpu(quota)
            node.quota = quota
            changed[node.name] = quota
        monitor.set_quotas({n.name: n.quota for n in dep.nodes})
        if changed:
            t = time.monotonic()
            writer.append(
                "events", events_frame([(t, t, "quotas", "", {"setup": name, **changed})], self.t0)
            )

    # ---- deployment and levels -----------------------------------------------------------------
    @contextlib.contextmanager
    def _deployed(
        self, name: str, spec: ExperimentSpec, workdir: Path, ctx: _RunContext
    ) -> Iterator[tuple[Deployment, Monitor]]:
        """``spec``'s system deployed and monitored; stopped and its cgroups removed after."""
        writer, hierarchy = ctx.writer, ctx.hierarchy
        self.progress({"event": "deploy", "setup": name})
        t_deploy = time.monotonic()
        deployment = start_system(spec.system, workdir, ctx.supervisor, hierarchy)
        deployed = [(t_deploy, time.monotonic(), "deploy", "", {"setup": name, **deployment.facts})]
        writer.append("events", events_frame(deployed, self.t0))
        monitor = Monitor(spec.monitor.interval, self.t0, [_probe(n) for n in deployment.nodes])
        monitor.start()

        def follow(change: Scaled) -> None:
            """The monitor samples the replicas there are; the change is an event."""
            for node in change.added:
                monitor.add(_probe(node))
            for node in change.removed:
                monitor.remove(node.name)
            detail = {
                "setup": name,
                "replicas": len(deployment.replicas(change.component)),
                "added": [n.name for n in change.added],
                "removed": [n.name for n in change.removed],
            }
            writer.append(
                "events",
                events_frame(
                    [(change.asked, time.monotonic(), "scale", change.component, detail)], self.t0
                ),
            )

        deployment.listeners.append(follow)
        try:
            yield deployment, monitor
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

    def _workload(self, deployment: Deployment, spec: ExperimentSpec) -> Any:
        from tierscope.spec.workload import merge_workload

        return deployment.driver.workload(
            merge_workload(deployment.workload, spec.workload), f"{self.source}: workload"
        )

    def _level(
        self,
        name: str,
        spec: ExperimentSpec,
        index: int,
        level: float,
        rep: int,
        deployment: Deployment,
        monitor: Monitor,
        writer: RunWriter,
        workload: Any,
    ) -> None:
        level_run = LevelRun(self, name, spec, level, rep, deployment, monitor, writer)
        # the same seed for a level in every setup: common random numbers across setups
        outcome = level_run.run(workload, seed=spec.system.seed * 1_000_003 + 1000 * index + rep)
        self.outcomes.append(outcome)
        self.progress({"event": "level_done", "outcome": outcome})
        if self.supervisor is not None:
            self.supervisor.check_alive()

    # ---- summary -------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        # not measured (NaN in the points table) is null in the JSON document
        points = [
            {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in o.point.items()}
            for o in self.outcomes
        ]
        return {
            "run_dir": str(self.out_dir),
            "points": points,
            "warnings": [*self.notes, *(w for o in self.outcomes for w in o.warnings)],
            "monitor": self.monitor_stats,
        }


@contextlib.contextmanager
def deployed_system(system: SystemSpec, *, source: str) -> Iterator[tuple[Deployment, str]]:
    """``system`` deployed for work that is not a sweep (``kafka reliability``), with what a
    sweep has: the run's claim (leftovers of killed runs removed first), cgroups, supervisor
    and reaper; everything stopped and removed after. Yields the deployment and the run id
    (the tag of its network faults' rules)."""
    target = target_for(system.kind)
    try:
        target.check(system)
    except SpecError as exc:
        raise SpecError(source, exc.errors) from None
    run_id = uuid.uuid4().hex[:8]
    with claim_run(run_id) as claim:
        try:
            hierarchy: Hierarchy | None = open_hierarchy(f"tierscope-{run_id}")
        except CgroupUnavailableError:
            hierarchy = None
        with _scratch(run_id, claim, hierarchy) as (workdir, supervisor):
            deployment = start_system(system, workdir, supervisor, hierarchy)
            try:
                yield deployment, run_id
            finally:
                deployment.stop()


@contextlib.contextmanager
def _scratch(
    run_id: str, claim: RunClaim, hierarchy: Hierarchy | None
) -> Iterator[tuple[Path, Supervisor]]:
    """The run's scratch folder and its supervisor with the reaper guarding them; at the end
    every process is stopped, the cgroups and the folder removed, whatever happened."""
    workdir = Path(tempfile.mkdtemp(prefix=f"tierscope-{run_id}-"))
    supervisor = Supervisor(workdir, claim)
    try:
        supervisor.start_reaper()
        if hierarchy is not None:
            supervisor.note_paths(*hierarchy.roots.values())
        yield workdir, supervisor
    finally:
        supervisor.stop_all()
        if hierarchy is not None:
            hierarchy.remove()
        supervisor.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _check_interleavable(setups: dict[str, ExperimentSpec], source: str) -> None:
    """Interleaved setups share one deployment and its monitor: they may differ in CPU quotas
    (that keep the same processes), levels, workload, phases and faults."""
    names = list(setups)
    first = setups[names[0]]
    for name in names[1:]:
        s = setups[name]
        for part, same in (
            ("system", deployed_as(s.system) == deployed_as(first.system)),
            ("monitor", s.monitor == first.monitor),
        ):
            if not same:
                raise InputError(
                    "sweep.interleave",
                    True,
                    f"setups that can share one deployment: '{name}' differs from "
                    f"'{names[0]}' in {part} beyond CPU quotas that keep the same processes",
                    source=source,
                )


class LevelRun:
    """One (setup, level, repetition): faults, load, and everything measured, into the store."""

    def __init__(
        self,
        runner: Runner,
        setup: str,
        spec: ExperimentSpec,
        level: float,
        rep: int,
        deployment: Deployment,
        monitor: Monitor,
        writer: RunWriter,
    ) -> None:
        self.runner = runner
        self.setup, self.spec, self.level, self.rep = setup, spec, level, rep
        self.deployment, self.monitor, self.writer = deployment, monitor, writer
        self.t0 = runner.t0
        self.tag = (setup, level, rep)
        self.client = pl.DataFrame()
        self.metrics = pl.DataFrame()
        self.warnings: list[str] = []

    def run(self, workload: Any, *, seed: int) -> LevelOutcome:
        ph, dep = self.spec.phases, self.deployment
        # What was sampled or finished between levels belongs to no level.
        self.monitor.drain()
        for node in [*dep.nodes, *dep.collect_retired()]:
            for source in node.request_sources:
                source()
        generator = dep.driver.generator(
            workload,
            seed=seed,
            # Unique across the run, so requests can be joined across tiers by id alone.
            request_id_prefix=f"{self.setup}/{self.level:g}/{self.rep}/",
        )
        targets = [FaultTarget(n.tier, n.name, n.replica, n.pids, n.cgroup) for n in dep.nodes]
        handle = generator.start(
            self.level, ph.ramp_up, ph.steady, ph.ramp_down, setup=self.setup, rep=self.rep
        )
        faults = FaultScheduler(
            self.spec.faults, targets, ph.total, links=dep.links, tag=self.runner.run_id
        ).start(handle.t0)
        result = None
        try:
            while not handle.done:
                time.sleep(PROGRESS_EVERY_S)
                if self.runner.supervisor is not None:
                    self.runner.supervisor.check_alive()
                tick = {
                    "event": "tick",
                    "setup": self.setup,
                    "level": self.level,
                    "rep": self.rep,
                    "snapshot": handle.snapshot(),
                    "tiers": dict(self.monitor.latest),
                }
                self.runner.progress(tick)
                if self.runner.control is not None:
                    self.runner.control(dep, tick)
            result = handle.wait()
        finally:
            # Whatever happened, keep what this level measured.
            measured = result
            if measured is None:
                with contextlib.suppress(Exception):
                    measured = handle.stop()
            self._store(measured, faults.stop())
        steady = (handle.steady_start - self.t0, handle.steady_end - self.t0)
        phases = [
            (handle.t0, handle.steady_start, "ramp_up"),
            (handle.steady_start, handle.steady_end, "steady"),
            (handle.steady_end, handle.load_end, "ramp_down"),
        ]
        detail = {"setup": self.setup, "level": self.level, "rep": self.rep}
        self.writer.append(
            "events",
            events_frame(
                ((a, b, "phase", "", {**detail, "phase": p}) for a, b, p in phases), self.t0
            ),
        )
        point = point_row(self.client, self.metrics, result.summary, *self.tag, steady)
        self.writer.append("points", pl.DataFrame([point]))
        self.writer.flush()
        return LevelOutcome(
            self.setup,
            self.level,
            self.rep,
            point,
            result.summary,
            [*client_warnings(result.summary, self.setup, self.level), *self.warnings],
        )

    def _store(self, result: Any, occurred: list[Occurrence]) -> None:
        w, t0 = self.writer, self.t0
        if result is not None:
            self.client = client_requests(result.requests, t0, *self.tag)
            w.append("requests", self.client)
            w.append("metrics", client_metrics(result.client_metrics(), t0, *self.tag))
        self.metrics = label(self.monitor.drain(), *self.tag)
        w.append("metrics", self.metrics)
        skipped = []
        for node in [*self.deployment.nodes, *self.deployment.collect_retired()]:
            for source in node.request_sources:
                w.append("requests", tier_requests(source(), node.tier, node.name, t0, *self.tag))
            skipped += [(node.tier, s) for s in skipped_records(node)]
        rows = (
            (
                o.t_start,
                o.t_end,
                o.kind,
                o.tier,
                {
                    "node": o.node,
                    "setup": self.setup,
                    "level": self.level,
                    "rep": self.rep,
                    **o.detail,
                },
            )
            for o in occurred
        )
        w.append("events", events_frame(rows, t0))
        if skipped:  # lines of a tier's log that were not records: counted, never fatal
            t = time.monotonic()
            detail = {"setup": self.setup, "level": self.level, "rep": self.rep}
            w.append(
                "events",
                events_frame(
                    ((t, t, "skipped_records", k, {**detail, **s}) for k, s in skipped), t0
                ),
            )
            self.warnings += [_skipped_warning(self.setup, self.level, s) for _, s in skipped]
        w.flush()


# ---- table conversion ----------------------------------------------------------------------------
def _probe(node: Node) -> NodeProbe:
    return NodeProbe(
        tier=node.tier,
        node=node.name,
        cgroup=node.cgroup,
        pids=node.pids if node.cgroup is None else None,
        quota_cores=node.quota,
        gauges=node.gauges,
        extra=node.extra_metrics,
    )


def events_frame(
    rows: Iterable[tuple[float, float, str, str, dict[str, Any]]], t0: float
) -> pl.DataFrame:
    """Event rows with monotonic times -> the store's events table (run time)."""
    data = [
        {
            "t_start": a - t0,
            "t_end": b - t0,
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


#: Columns the runner keeps in requests.parquet after the contract ones, same for every tier
#: (null where a tier has no such value), so all parts of the table share one schema.
REQUEST_EXTRAS: dict[str, pl.DataType] = {
    "node": pl.String(),
    "visit": pl.String(),
    "parent": pl.String(),
    "detail": pl.String(),
    "intended_start": pl.Float64(),
    "actual_start": pl.Float64(),
    "bytes": pl.Int64(),
    "phase": pl.String(),
    "error": pl.String(),
    "user": pl.Int64(),
    "session": pl.Int64(),
    # messages (kafka): where they were appended, when, when first consumed, how many times
    "partition": pl.Int64(),
    "offset": pl.Int64(),
    "appended": pl.Float64(),
    "consumed": pl.Float64(),
    "copies": pl.Int64(),
    "config": pl.Int64(),  # the producer configuration that sent it (0, then each live switch)
    # database operations (cassandra): the node that coordinated it, its consistency level
    "coordinator": pl.String(),
    "consistency": pl.String(),
}
#: Times of a client record besides start and end (monotonic seconds until stored).
TIMES = ("intended_start", "actual_start", "appended", "consumed")


def _with_extras(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(
        *(
            (pl.col(c) if c in frame.columns else pl.lit(None)).cast(t).alias(c)
            for c, t in REQUEST_EXTRAS.items()
        )
    ).select(*REQUEST_COLUMNS, *REQUEST_EXTRAS)


REQUEST_COLUMNS = (
    "tier",
    "request_id",
    "start",
    "end",
    "setup",
    "level",
    "rep",
    "interaction",
    "status",
)


def client_metrics(frame: pl.DataFrame, t0: float, setup: str, level: float, rep: int):
    """The load generator's own samples (tier client) in the run's time base."""
    return label(
        frame.with_columns(pl.col("t") - t0, pl.lit("client").alias("node")), setup, level, rep
    )


def label(frame: pl.DataFrame, setup: str, level: float, rep: int) -> pl.DataFrame:
    return frame.with_columns(
        pl.lit(setup).alias("setup"), pl.lit(float(level)).alias("level"), pl.lit(rep).alias("rep")
    )


def client_requests(
    frame: pl.DataFrame, t0: float, setup: str, level: float, rep: int
) -> pl.DataFrame:
    """The load generator's records (monotonic seconds) in the store's time base, tier client."""
    shift = [c for c in ("start", "end", *TIMES) if c in frame.columns]
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
    summary: dict[str, Any],
    setup: str,
    level: float,
    rep: int,
    steady: tuple[float, float],
) -> dict[str, Any]:
    """Steady-window throughput (successful requests ending in it per second), response-time
    mean and percentiles, errors, per-tier means of every metric, and the load generator's
    own CPU, timer lag and bottleneck verdict."""
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
                if r["metric"].partition(":")[0] in MEAN_OVER_NODES
                or r["tier"] in ("client", "host")
                else r["sum"]
            )
            row[f"{r['tier']}.{r['metric']}"] = float(value)
    row["client.cpu_cores"] = _nan(summary.get("client_cpu"))
    row["client.lag_p99_s"] = _nan((summary.get("lag") or {}).get("p99"))
    row["client.bottleneck"] = (
        1.0
        if summary.get("client_bottleneck")
        else 0.5
        if summary.get("client_near_bottleneck")
        else 0.0
    )
    return row


def _nan(x: Any) -> float:
    return math.nan if x is None else float(x)


def client_warnings(summary: dict[str, Any], setup: str, level: float) -> list[str]:
    """Say when the load generator itself was, or came close to being, the bottleneck (the
    load generator's own verdict and reasons, so every command says the same)."""
    if not summary.get("client_near_bottleneck"):
        return []
    what = "was the bottleneck" if summary.get("client_bottleneck") else "came close to the limit"
    why = "; ".join(summary.get("client_bottleneck_why") or [])
    return [f"setup {setup}, level {level:g}: the load generator {what}: {why}"]


def _skipped_warning(setup: str, level: float, skipped: dict[str, Any]) -> str:
    n = skipped["lines"]
    what = "line of" if n == 1 else "lines of"
    was = "was not a record" if n == 1 else "were not records"
    return (
        f"setup {setup}, level {level:g}: skipped {n} {what} {skipped['node']}'s request log "
        f"that {was} (first: {skipped['example']})"
    )


def run_experiment(
    spec: ExperimentSpec,
    doc: dict[str, Any],
    out_dir: Path,
    *,
    source: str = "<spec>",
    progress: Progress | None = None,
    control: Control | None = None,
) -> dict[str, Any]:
    """Run ``spec`` into ``out_dir`` (new or empty); returns the run summary.

    ``control(deployment, tick)`` is called with every progress tick of a level (four times a
    second: the client's snapshot and the monitor's latest samples per node) and may change
    the deployment while the load runs (``deployment.scale``)."""
    return Runner(spec, doc, out_dir, source=source, progress=progress, control=control).run()
