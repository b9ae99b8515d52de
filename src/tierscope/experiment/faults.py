"""Scheduled ground-truth perturbations of a running system: stalls, competing CPU load and
network delay and loss on a link.

Design decisions:

* A **stall** freezes every process of a node at once — SIGSTOP to each process in the node
  (its cgroup, or its process group), SIGCONT at the end — which stops any server, ours or
  nginx/PostgreSQL, exactly like a VM pause or a long GC: connections stay open, requests pile
  up in socket backlogs and upstream queues. A **cpu_hog** starts busy processes inside the
  node's cgroup, so they compete for the node's own CPU quota (an interfering co-located job).
* The times written to ``events.parquet`` are the measured moments the signals were sent and
  the hog started/stopped (CLOCK_MONOTONIC, converted to run time by the runner), not the
  planned ones, so the ground truth is what really happened.
* A **network** fault delays and drops the packets of a named link (its flows come from the
  deployment, e.g. producer-brokers) with the NFQUEUE emulator (:mod:`.netem`) for its window;
  the event records the packets it saw, lost and the mean delay it gave them.
* Whatever happens, a stalled node is continued, hogs are killed and emulated links are
  restored when the scheduler stops.
* The scheduler's thread runs in the real-time class where it may (root), so that a busy host
  does not stretch a stall by waking it late.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tierscope.experiment.cgroups import NodeCgroup
from tierscope.experiment.netem import Emulator, LinkFault
from tierscope.spec.experiment import FaultSpec

HOG_CODE = "import time\nwhile True:\n    pass\n"


@dataclass
class FaultTarget:
    """A node a fault can act on."""

    tier: str
    node: str
    replica: int
    pids: Callable[[], list[int]]
    cgroup: NodeCgroup | None


@dataclass
class Occurrence:
    kind: str
    tier: str
    node: str
    t_start: float  # monotonic
    t_end: float
    detail: dict[str, Any]


class FaultScheduler:
    """Runs the faults of one level on a thread, from ``t0`` (monotonic) on."""

    def __init__(
        self,
        faults: list[FaultSpec],
        targets: list[FaultTarget],
        horizon: float,
        *,
        links: Callable[[str], list[LinkFault]] | None = None,
        tag: str = "run",
    ) -> None:
        self.plan: list[tuple[float, float, FaultSpec, list[FaultTarget]]] = []
        self.links, self.tag = links, tag
        for f in faults:
            if f.link is not None:  # a network fault: the link is its one target
                hit = [FaultTarget(f.link, f.link, 1, list, None)]
            else:
                hit = [
                    t
                    for t in targets
                    if t.tier == f.tier and (f.replica is None or t.replica == f.replica)
                ]
            for start, end in f.windows(horizon):
                self.plan.append((start, end, f, hit))
        self.plan.sort(key=lambda p: p[0])
        self.done: list[Occurrence] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped: list[list[int]] = []
        self._hogs: list[subprocess.Popen[bytes]] = []
        self._emulators: list[Emulator] = []
        self._lock = threading.Lock()

    def start(self, t0: float) -> FaultScheduler:
        if self.plan:
            self._thread = threading.Thread(
                target=self._run, args=(t0,), name="tierscope-faults", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> list[Occurrence]:
        """Cancel what has not happened, end what is happening; returns what happened."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
        self._release_all()
        return self.done

    def _sleep_until(self, t: float) -> bool:
        """False if stopped first."""
        return not self._stop.wait(max(0.0, t - time.monotonic()))

    def _run(self, t0: float) -> None:
        _realtime_thread()
        # Occurrences may overlap (several faults): handle them as a merged timeline of actions.
        actions: list[tuple[float, int, int]] = []  # (time, 0=begin/1=end, plan index)
        for i, (start, end, _, _) in enumerate(self.plan):
            actions.append((t0 + start, 0, i))
            actions.append((t0 + end, 1, i))
        actions.sort(key=lambda a: (a[0], -a[1]))
        begun: dict[int, tuple[float, object]] = {}
        for when, what, i in actions:
            if not self._sleep_until(when):
                break
            _, _, spec, targets = self.plan[i]
            if what == 0:
                handle = self._begin(spec, targets)
                begun[i] = (time.monotonic(), handle)  # after the signals went out
            elif i in begun:
                self._close(i, *begun.pop(i))
        # stopped early: close the occurrences that began
        for i, (started, handle) in begun.items():
            self._close(i, started, handle)

    def _close(self, i: int, started: float, handle: object) -> None:
        _, _, spec, targets = self.plan[i]
        measured = self._end(spec, targets, handle)
        ended = time.monotonic()
        detail: dict[str, Any] = {"planned_duration": spec.duration, **measured}
        if spec.kind == "cpu_hog":
            detail["cores"] = spec.cores
        if spec.kind == "network":
            detail |= {"delay": spec.delay and spec.delay.native(),
                       "loss": spec.loss and spec.loss.native()}  # fmt: skip
        for t in targets:
            self.done.append(Occurrence(spec.kind, t.tier, t.node, started, ended, detail))

    def _begin(self, spec: FaultSpec, targets: list[FaultTarget]) -> object:
        if spec.kind == "network":
            return self._begin_network(spec)
        if spec.kind == "stall":
            stopped = []
            for t in targets:
                pids = t.pids()
                with self._lock:  # registered first: continued whatever happens next
                    self._stopped.append(pids)
                _signal_all(pids, signal.SIGSTOP)
                stopped.append(pids)
            return stopped
        hogs = []
        for t in targets:
            for _ in range(math.ceil(spec.cores)):
                argv = [sys.executable, "-I", "-c", HOG_CODE]  # -I: nothing from the cwd
                cmd = t.cgroup.wrap(argv) if t.cgroup is not None else argv
                p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True, cwd="/")
                hogs.append(p)
        with self._lock:
            self._hogs.extend(hogs)
        return hogs

    def _begin_network(self, spec: FaultSpec) -> Emulator | None:
        """The link's packet flows delayed and dropped (None: no such link; nothing done)."""
        flows = self.links(spec.link) if self.links is not None and spec.link else []
        if not flows:
            return None
        delay = spec.delay.native() if spec.delay else None
        loss = spec.loss.native() if spec.loss else None
        em = Emulator([replace(f, delay=delay, loss=loss) for f in flows], tag=self.tag)
        with self._lock:  # registered first: removed whatever happens next
            self._emulators.append(em)
        return em.start()

    def _end(self, spec: FaultSpec, targets: list[FaultTarget], handle: object) -> dict[str, Any]:
        """End what ``_begin`` did; what was measured of it."""
        if spec.kind == "network":
            if not isinstance(handle, Emulator):
                return {"packets": 0}
            with self._lock, contextlib.suppress(ValueError):
                self._emulators.remove(handle)
            stats = handle.stop()
            packets = sum(s["packets"] for s in stats)
            lost = sum(s["lost"] for s in stats)
            held = sum(s["delay_sum"] for s in stats)
            return {"packets": packets, "lost": lost,
                    "mean_delay": held / max(packets - lost, 1)}  # fmt: skip
        if spec.kind == "stall":  # exactly the processes stopped (an attached system's too)
            for pids in handle or []:  # type: ignore[attr-defined]
                _signal_all(pids, signal.SIGCONT)
                with self._lock, contextlib.suppress(ValueError):
                    self._stopped.remove(pids)
            return {}
        for p in handle or []:  # type: ignore[attr-defined]
            _kill(p)
        return {}

    def _release_all(self) -> None:
        with self._lock:
            stopped, self._stopped = self._stopped, []
            hogs, self._hogs = self._hogs, []
            emulators, self._emulators = self._emulators, []
        for pids in stopped:
            _signal_all(pids, signal.SIGCONT)
        for p in hogs:
            _kill(p)
        for em in emulators:
            with contextlib.suppress(Exception):
                em.stop()


def _realtime_thread() -> None:
    """Put the calling thread in the real-time FIFO class (lowest priority) where allowed: on a
    busy host a normal thread woke up to 60 ms late, and a 300 ms stall lasted 364 ms. The
    thread sleeps between actions; its children (hogs) start in the normal class again."""
    with contextlib.suppress(AttributeError, OSError):
        policy = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
        os.sched_setscheduler(0, policy, os.sched_param(os.sched_get_priority_min(os.SCHED_FIFO)))


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _kill(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(2.0)
