"""The worker processes of a load driver (Kafka's producers and consumers, Cassandra's YCSB
clients): their record files read as they grow, their CPU sampled, their end, and the client
verdict from their CPU.

Design decision: a worker writes fixed-size binary rows (a numpy dtype per file) and the parent
reads what was appended since its last look (:class:`Tail`), so a worker that dies keeps what it
measured, and a million records cost no Python loop. Each worker's CPU (the process and its main
thread, from /proc) is sampled every :data:`SAMPLE_S`; the workers together are the run's
client (tier ``client``, node ``loadgen``) as the HTTP generator is.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from tierscope.load._frames import CLIENT, NODE
from tierscope.load._summary import verdict

if TYPE_CHECKING:
    from tierscope.load.generator import LoadSnapshot

#: How often each worker's CPU is sampled.
SAMPLE_S = 0.25
#: A request sent later than this after its intended time is late (as for HTTP requests).
LATE_S = 0.005


class Tail:
    """New fixed-size rows of a worker's record file since the last call."""

    def __init__(self, path: Path, dtype: np.dtype) -> None:
        self.path, self.dtype, self.offset = path, dtype, 0
        self.parts: list[np.ndarray] = []

    def read(self) -> np.ndarray:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return np.empty(0, self.dtype)
        n = (size - self.offset) // self.dtype.itemsize
        if n <= 0:
            return np.empty(0, self.dtype)
        rows = np.fromfile(self.path, self.dtype, count=n, offset=self.offset)
        self.offset += n * self.dtype.itemsize
        self.parts.append(rows)
        return rows

    @property
    def rows(self) -> int:
        """Rows read so far."""
        return self.offset // self.dtype.itemsize

    def all(self) -> np.ndarray:
        self.read()
        return np.concatenate(self.parts) if self.parts else np.empty(0, self.dtype)


@dataclass
class Worker:
    """One worker process: its role and index, its record files and its CPU samples."""

    role: str
    index: int
    proc: subprocess.Popen[bytes]
    tails: dict[str, Tail]
    cpu: list[tuple[float, float, float]] = field(default_factory=list)  # (t, process, main)
    intended: np.ndarray = field(default_factory=lambda: np.empty(0))  # by seq, read so far

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


def cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU seconds of the process and of its main thread (NaN once it is gone)."""
    tick = os.sysconf("SC_CLK_TCK")

    def read(path: str) -> float:
        try:
            with open(path, "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            return math.nan

    return read(f"/proc/{pid}/stat"), read(f"/proc/{pid}/task/{pid}/stat")


def sample_cpu(workers: list[Worker]) -> None:
    """A CPU sample of every running worker not sampled for :data:`SAMPLE_S`."""
    now = time.monotonic()
    for wk in workers:
        if wk.proc.poll() is None and (not wk.cpu or now - wk.cpu[-1][0] >= SAMPLE_S):
            wk.cpu.append((now, *cpu_seconds(wk.proc.pid)))


def cpu_total(workers: list[Worker]) -> float:
    """CPU seconds the workers used up to their last samples."""
    return sum(w.cpu[-1][1] for w in workers if w.cpu and not math.isnan(w.cpu[-1][1]))


def end_workers(workers: list[Worker]) -> None:
    """SIGTERM to the workers still running (they write what they have), SIGKILL after 10 s."""
    for wk in workers:
        if wk.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(wk.proc.pid, signal.SIGTERM)
    for wk in workers:
        try:
            wk.proc.wait(10.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(wk.proc.pid, signal.SIGKILL)
            wk.proc.wait(5.0)


def failures(workers: list[Worker], out: Path) -> str | None:
    """What failed among ended workers: each exit status other than 0 or SIGTERM's, with the
    last line of the traceback a worker left in ``out/<role>-<index>.error``."""
    out_of = []
    for w in workers:
        if w.proc.returncode in (0, -signal.SIGTERM):
            continue
        why = ""
        with contextlib.suppress(OSError):
            lines = [x for x in (out / f"{w.name}.error").read_text().splitlines() if x.strip()]
            why = f": {lines[-1][:300]}" if lines else ""
        out_of.append(f"{w.role} {w.index} exited with status {w.proc.returncode}{why}")
    return "; ".join(out_of) or None


def cpu_rows(workers: list[Worker], main_roles: tuple[str, ...]) -> pl.DataFrame:
    """Each worker's CPU (cores) per sampling interval, and the busy share of the main thread
    of the workers whose main thread offers the load (``main_roles``)."""
    rows = []
    for w in workers:
        for (t1, c1, m1), (t2, c2, m2) in zip(w.cpu, w.cpu[1:], strict=False):
            if t2 > t1 and not (math.isnan(c1) or math.isnan(c2)):
                rows.append((t2, w.name, "cpu_cores", (c2 - c1) / (t2 - t1)))
                if w.role in main_roles and not (math.isnan(m1) or math.isnan(m2)):
                    rows.append((t2, w.name, "main_thread_busy", (m2 - m1) / (t2 - t1)))
    schema = {"t": pl.Float64, "node": pl.String, "metric": pl.String, "value": pl.Float64}
    return pl.DataFrame(rows, schema=schema, orient="row")


def client_samples(rows: pl.DataFrame, setup: str, level: float, rep: int) -> pl.DataFrame:
    """The workers as one client (as the HTTP generator is): cores summed, the busiest main
    thread, per sampling instant, in the store's long metrics format."""
    cores = rows.filter(pl.col("metric") == "cpu_cores").group_by("t").agg(pl.col("value").sum())
    busy = (
        rows.filter(pl.col("metric") == "main_thread_busy").group_by("t").agg(pl.col("value").max())
    )
    total = pl.concat([cores.with_columns(pl.lit("cpu_cores").alias("metric")),
                       busy.with_columns(pl.lit("main_thread_busy").alias("metric"))])  # fmt: skip
    return total.sort("t", "metric").select(
        "t", pl.lit(setup).alias("setup"), pl.lit(float(level)).alias("level"),
        pl.lit(rep, pl.Int64).alias("rep"), pl.lit(CLIENT).alias("tier"),
        pl.lit(NODE).alias("node"), "metric", "value",
    )  # fmt: skip


def window_cpu(rows: pl.DataFrame, a: float, b: float) -> tuple[float | None, float | None]:
    """Cores all workers used and the busiest main thread's share, over [a, b]."""
    w = rows.filter((pl.col("t") > a) & (pl.col("t") <= b + SAMPLE_S))
    if not w.height:
        return None, None
    cores = w.filter(pl.col("metric") == "cpu_cores").group_by("node").agg(pl.col("value").mean())
    main = w.filter(pl.col("metric") == "main_thread_busy")
    busiest = main.group_by("node").agg(pl.col("value").mean())["value"].max()
    return float(cores["value"].sum()), (None if busiest is None else float(busiest))  # type: ignore[arg-type]


def client_verdict(rows: pl.DataFrame, a: float, b: float, *, late: int = 0, sent: int = 0,
                   ) -> dict[str, Any]:  # fmt: skip
    """Whether the client was the bottleneck over [a, b], from the workers' CPU rows (and,
    where lateness is the client's own, its ``late`` requests of ``sent``)."""
    cores, busiest = window_cpu(rows, a, b)
    bottleneck, near, why = verdict(
        busiest_thread=busiest, cores_used=cores, lag_p99=None, late=late, sent=sent,
        not_sent=0, machine_busy=None, late_threshold_s=LATE_S,
    )  # fmt: skip
    return {"client_cpu": cores, "client_cpu_max_thread": busiest, "client_bottleneck": bottleneck,
            "client_near_bottleneck": near, "client_bottleneck_why": why}  # fmt: skip


def quantile(x: np.ndarray, pct: float) -> float | None:
    x = x[np.isfinite(x)]
    return float(np.percentile(x, pct)) if x.size else None


def quantiles(x: np.ndarray, keys: tuple[str, ...] = ("mean", "p50", "p95", "p99", "max")
              ) -> dict[str, float | None]:  # fmt: skip
    x = x[np.isfinite(x)] if x.size else x
    out: dict[str, float | None] = {}
    for k in keys:
        if not x.size:
            out[k] = None
        elif k == "mean":
            out[k] = float(x.mean())
        elif k == "max":
            out[k] = float(x.max())
        else:
            out[k] = float(np.percentile(x, float(k[1:])))
    return out


class WorkerHandle:
    """A running load of worker processes (Kafka's producers and consumers, Cassandra's YCSB
    clients): the level's phase times, the live snapshot, waiting and stopping, shared.

    A subclass names its workers (:attr:`workers`; :attr:`offering`, those that offer the
    load), reads their new records into :attr:`counts` (``sent``, ``completed``, ``errors``)
    and :attr:`recent` (latencies seen, by when) in :meth:`poll_records`, may wait for more
    than the offering workers' end (:meth:`drained`), and assembles its result from what the
    ended workers wrote (:meth:`assemble`)."""

    def __init__(self, out: Path, *, level: float, setup: str, rep: int,
                 times: tuple[float, float, float, float]) -> None:  # fmt: skip
        self.out = out
        self.level, self.setup, self.rep = level, setup, rep
        self.t0, self.steady_start, self.steady_end, self.load_end = times
        self.counts = {"sent": 0, "completed": 0, "errors": 0}
        self.recent: list[tuple[float, np.ndarray]] = []
        self.stopped_at: float | None = None
        self.result: Any = None
        self._last_snapshot_cpu = (self.t0, 0.0)

    # ---- what a kind of load says ------------------------------------------------------------
    @property
    def workers(self) -> list[Worker]:
        raise NotImplementedError

    @property
    def offering(self) -> list[Worker]:
        return self.workers

    def poll_records(self) -> None:
        raise NotImplementedError

    def drained(self) -> bool:
        """Whether what the ended offering workers started has all come back (default: yes)."""
        return True

    def assemble(self, failure: str | None) -> Any:
        raise NotImplementedError

    # ---- shared ------------------------------------------------------------------------------
    def keep_recent(self, now: float, latencies: np.ndarray) -> None:
        """Latencies seen at ``now``, for the snapshot's last second."""
        self.recent.append((now, latencies))
        self.recent = [(t, x) for t, x in self.recent if t > now - 1.0]

    @property
    def done(self) -> bool:
        if self.result is not None:
            return True
        sample_cpu(self.workers)
        return all(w.proc.poll() is not None for w in self.offering) and self.drained()

    def phase(self, now: float) -> str:
        if self.result is not None:
            return "done"
        return ("starting" if now < self.t0 else "ramp-up" if now < self.steady_start
                else "steady" if now < self.steady_end else "ramp-down" if now < self.load_end
                else "draining")  # fmt: skip

    def snapshot(self) -> LoadSnapshot:
        from tierscope.load.generator import LoadSnapshot

        now = time.monotonic()
        sample_cpu(self.workers)
        self.poll_records()
        self.recent = [(t, x) for t, x in self.recent if t > now - 1.0]
        lat = np.concatenate([x for _, x in self.recent] or [np.empty(0)])
        cpu_now = cpu_total(self.workers)
        t_prev, cpu_prev = self._last_snapshot_cpu
        self._last_snapshot_cpu = (now, cpu_now)
        c = self.counts
        return LoadSnapshot(
            elapsed=now - self.t0, phase=self.phase(now), sent=c["sent"],
            completed=c["completed"], errors=c["errors"], outstanding=c["sent"] - c["completed"],
            active=sum(w.proc.poll() is None for w in self.offering), connections=0,
            throughput=lat.size / min(1.0, max(now - self.t0, 1e-9)) if now > self.t0 else None,
            p50=quantile(lat, 50), p95=quantile(lat, 95), p99=quantile(lat, 99),
            client_cpu=(cpu_now - cpu_prev) / (now - t_prev) if now > t_prev else None,
            lag_max=0.0, late=0, not_sent=0,
        )  # fmt: skip

    def join(self, timeout_s: float) -> bool:
        """Whether the load ended within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not self.done:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def wait(self) -> Any:
        try:
            while not self.done:
                time.sleep(0.05)
        except KeyboardInterrupt:
            self.stop()
            raise
        return self.finish()

    def stop(self) -> Any:
        """Stop now (workers write what they have) and return what was measured."""
        if self.stopped_at is None and self.result is None:
            self.stopped_at = time.monotonic()
        return self.finish()

    def finish(self) -> Any:
        if self.result is None:
            end_workers(self.workers)
            self.result = self.assemble(failures(self.workers, self.out))
        return self.result
