"""Discrete-event simulation of a closed n-tier system whose replicas run under CPU quotas.

``predict`` runs this simulation until the real-system tests have been soaked on the native
twin (``tierscope.sim.twin``), which does the same 48x faster (``benchmarks/test_bench_twin.py``);
then this module goes.

Why a dedicated simulator: a Linux CFS quota is not a slower processor. A replica with a quota
of q cores runs at full speed (up to one core per process) until it has used q x 100 ms of CPU
in the current 100 ms period, then it is *throttled* until the period ends. Below saturation a
request therefore usually runs at full speed, while a processor-sharing server of speed q (the
product-form reading of a quota) stretches every request by 1/q: measured on the embedded
system, the product-form model overestimates the response time near the knee several-fold.
Capacity is the same in both (q cores on average), so product-form solvers stay right for
throughput bounds and this simulator is what predicts response times.

Model, per tier replica: the requests present share ``cap`` cores (its processes), either in
processor sharing or round robin with a time slice (``quantum``: Python's GIL hands the
interpreter over every 5 ms, so a Python server behaves like first-come-first-served for
requests shorter than that, and round robin for longer ones); while CPU budget is left. The
budget ((cpu - background) x period) is refilled at every period boundary (each replica has its
own random phase); background CPU (a tier's load that does not depend on requests) is taken
from the budget. Requests go through the tiers in order, each spending its own CPU demand at
one replica: the first tier's replicas are chosen round robin, the others by fewest requests
present (the embedded web tier's balancing), except writes at a replicated last tier, which run
at every replica one after the other (RAIDb-1). A ``delay`` adds what happens outside the tiers
(network, client, wake-ups): constant, or its mean times a draw from ``delay_shape``. Users think
for an exponential (or constant) time between requests.

The kernel does not throw away all unused budget at a period boundary: a CPU's run queue keeps
up to ``min_cfs_rq_runtime`` (1 ms) of the runtime it took when its tasks go to sleep, and since
Linux 5.4 that runtime no longer expires, so it is spent in the next period on top of the
refilled quota. ``carry`` is that amount per replica (1 ms per process, each on its CPU). Nor
does it stop a running task the instant its runtime is spent: runtime is accounted at
scheduling events and at the scheduler tick (4 ms with CONFIG_HZ=250), so a request that started
with a little budget left often completes first; the overrun is a debt the next period repays
(``tick``). A task that wakes, or is switched to, with the runtime spent is throttled at once.

Per-request CPU demands are drawn from ``demand_samples`` (rows of per-tier demands measured for
real requests, so the mix and its correlations are kept) or are exponential with the tiers'
means.

The replicas share a host of ``host_cores`` cores with each other and with ``host_background``
runnable tasks' worth of other processes. CFS shares the cores fairly among the runnable tasks,
so while n tasks of the replicas run (a throttled or stalled replica's tasks do not), each
progresses — and burns its quota budget — at ``share = min(1, C / (background + n))`` of a core.
Whenever n changes anywhere, every replica is advanced to that instant at the old share and
rescheduled at the new one (O(replicas) per event). Without a host (or while ``background + n``
stays within the cores) the share is 1 and the simulation is the one without sharing, event for
event.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque

import numpy as np

from tierscope.sim.twin import SimOutcome, SimTier, SimTrace

_INF = math.inf
_EPS = 1e-12
#: Kinds of a replica's next event.
DONE, SLICE, OUT = 0, 1, 2


class _Replica:
    """CPU of one replica: budgeted, ``cap`` cores, processor sharing or round robin."""

    def __init__(
        self,
        cap: float,
        budget: float,
        period: float,
        phase: float,
        quantum: float | None,
        carry: float = 0.0,
        tick: float | None = None,
        contention: float = 0.0,
        contention_upto: float = 1.0,
    ):
        self.cap = cap
        self.contention = contention
        self.contention_upto = contention_upto
        self.budget_per_period = budget
        self.budget = budget
        self.carry = carry
        self.tick = tick
        self.stopped = False  # throttled until the next refill
        self.period = period
        self.phase = phase
        self.quantum = quantum
        self.last = 0.0
        self.share = 1.0  # of a core each running task gets from the host (CFS fair share)
        self.busy = 0.0  # CPU seconds used
        # CFS statistics as the kernel counts them (nr_periods, nr_throttled): periods in which
        # the replica ran, and those in which it ran out of budget.
        self.periods = 0
        self.throttled = 0
        self._busy_at_refill = 0.0
        self._out = False
        self.frozen = 0  # stalls in progress (SIGSTOP: nothing runs)
        self.version = 0
        self.next_kind = DONE  # kind of the scheduled event
        # processor sharing: heap of (tag, seq, job) on a virtual clock
        self.heap: list[tuple[float, int, int]] = []
        self.vclock = 0.0
        # round robin: queue of [job, remaining work, slice left]; the first ``cap`` run
        self.queue: deque[list] = deque()
        self._seq = itertools.count()

    # ---- state -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.heap) if self.quantum is None else len(self.queue)

    def running(self) -> int:
        return min(len(self), int(self.cap)) if self.quantum is not None else 0

    def speed(self) -> float:
        """Cores in use now."""
        n = len(self)
        if n == 0 or self.stopped or self.frozen:
            return 0.0
        return min(float(n), self.cap) if self.quantum is None else float(self.running())

    def work_rate(self) -> float:
        """Work done per CPU second now: 1 / (1 + c (n - 1)) with n requests present (at
        most ``contention_upto``): the CPU a contended server burns on switching among them."""
        if not self.contention:
            return 1.0
        n = min(float(len(self)), self.contention_upto)
        return 1.0 / (1.0 + self.contention * max(n - 1.0, 0.0))

    def advance(self, t: float) -> None:
        dt = t - self.last
        if dt <= 0:
            return
        self.last = t
        s = self.speed()
        if s <= 0:
            return
        cpu = dt * s * self.share
        self.busy += cpu
        if self.budget < _INF:
            self.budget -= cpu  # below 0: runtime overrun until the next tick, repaid later
        g = self.work_rate() * self.share
        if self.quantum is None:
            self.vclock += dt * s * g / len(self.heap)
        else:
            # (the time slice is the GIL's switch interval: wall-clock time)
            for i in range(self.running()):
                self.queue[i][1] -= dt * g
                self.queue[i][2] -= dt

    # ---- jobs --------------------------------------------------------------------------------
    def add(self, job: int, work: float) -> None:
        if self.quantum is None:
            if not self.heap:
                self.vclock = 0.0
            heapq.heappush(self.heap, (self.vclock + work, next(self._seq), job))
        else:
            self.queue.append([job, work, self.quantum])

    def refill(self, count: bool) -> None:
        """Start a new period (after ``advance``); ``count``: add the one ending to the stats."""
        if count and self.busy > self._busy_at_refill:
            self.periods += 1
            self.throttled += self._out
        self._busy_at_refill = self.busy
        self._out = False
        self.stopped = False
        self.budget = self.budget_per_period + min(self.budget, self.carry)

    def next_event(self, now: float) -> tuple[float, int]:
        """(time, kind) of the replica's next change, (inf, DONE) if none."""
        s = self.speed()
        if s <= 0:
            return _INF, DONE
        if self.budget == _INF:
            t_out = _INF
        elif self.budget <= _EPS:
            t_out = now  # a scheduling point with the runtime spent: throttled now
        else:
            t_out = now + self.budget / (s * self.share)
            if self.tick:  # the kernel notices a running task's overrun at its next tick
                t_out = self.phase + math.ceil((t_out - self.phase) / self.tick) * self.tick
        g = self.work_rate() * self.share
        if self.quantum is None:
            t_job = now + (self.heap[0][0] - self.vclock) * len(self.heap) / (s * g)
            kind = DONE
        else:
            t_job, kind = _INF, DONE
            for i in range(self.running()):
                _, rem, left = self.queue[i]
                if rem / g <= left and now + rem / g < t_job:
                    t_job, kind = now + rem / g, DONE
                elif left < rem / g and now + left < t_job:
                    t_job, kind = now + left, SLICE
        return (t_job, kind) if t_job <= t_out else (t_out, OUT)

    def fire(self, kind: int) -> int | None:
        """Apply the event (after ``advance``); returns the job that finished, if any."""
        if kind == OUT:
            self.stopped = True
            self._out = True
            return None
        if self.quantum is None:
            tag, _, job = heapq.heappop(self.heap)
            self.vclock = tag
            return job
        run = self.running()
        for i in range(run):
            entry = self.queue[i]
            if entry[1] <= _EPS:
                del self.queue[i]
                return entry[0]
        for i in range(run):
            entry = self.queue[i]
            if entry[2] <= _EPS:
                entry[2] = self.quantum
                if len(self.queue) > run:  # someone waits: go to the back of the queue
                    del self.queue[i]
                    self.queue.append(entry)
                return None
        return None


def simulate_closed(
    tiers: list[SimTier],
    *,
    users: int,
    think_time: float,
    demand_means: np.ndarray,
    demand_samples: np.ndarray | None = None,
    write_fraction: np.ndarray | None = None,
    delay: float = 0.0,
    delay_shape: np.ndarray | None = None,
    stalls: list[tuple[int, int | None, float, float]] | None = None,
    stall_cycle: float = 0.0,
    think_dist: str = "exp",
    period: float = 0.1,
    warmup: float = 5.0,
    duration: float = 60.0,
    seed: int = 1,
    trace: bool = False,
    sample: float = 0.05,
    host_cores: float | None = None,
    host_background: float = 0.0,
) -> SimOutcome:
    """Simulate ``users`` closed-loop users for ``warmup + duration`` seconds.

    ``demand_samples[i, k]``: CPU seconds of the i-th sampled request at tier k (all replicas
    together); ``write_fraction[i]``: the part of its last-tier demand that is a write (run at
    every replica of a write-all tier). Without samples, demands are exponential with
    ``demand_means``. ``stalls``: (tier, replica or None for all, start, end) of the stalls in
    one ``stall_cycle`` of seconds, repeated from time 0; a stalled replica runs nothing. With
    ``trace``, every request, every stay at a replica and the CPU of every replica each
    ``sample`` seconds are recorded. ``host_cores``: the cores the replicas share with each
    other and with ``host_background`` runnable tasks of other processes (None: a core is free
    whenever a replica may run).
    """
    if host_cores is not None and not host_cores > 0:
        raise ValueError(f"host_cores must be > 0, not {host_cores}")
    if not host_background >= 0:
        raise ValueError(f"host_background must be >= 0, not {host_background}")
    rng = np.random.default_rng(seed)
    T = len(tiers)
    reps: list[list[_Replica]] = []
    for tier in tiers:
        budget = _INF if tier.quota is None else max(tier.quota - tier.background, 1e-6) * period
        reps.append(
            [
                _Replica(
                    tier.cap,
                    budget,
                    period,
                    float(rng.uniform(0, period)),
                    tier.quantum,
                    tier.carry,
                    tier.tick,
                    tier.contention,
                    tier.contention_upto,
                )
                for _ in range(tier.replicas)
            ]
        )
    events: list[tuple[float, int, int, int, int, int]] = []  # (t, seq, kind, a, b, version)
    seq = itertools.count()
    ARRIVE, REPLICA, REFILL, LEAVE, SAMPLE, STALL = 0, 1, 2, 3, 4, 5

    changed: set[tuple[int, int]] = set()  # replicas whose running tasks may have changed

    def schedule(k: int, r: int, now: float) -> None:
        rep = reps[k][r]
        changed.add((k, r))
        rep.version += 1
        t, rep.next_kind = rep.next_event(now)
        if t < _INF:
            heapq.heappush(events, (t, next(seq), REPLICA, k, r, rep.version))

    for k, row in enumerate(reps):
        for r, rep in enumerate(row):
            if rep.budget_per_period < _INF:
                heapq.heappush(events, (rep.phase, next(seq), REFILL, k, r, 0))

    n_samples = 0 if demand_samples is None else demand_samples.shape[0]
    n_shape = 0 if delay_shape is None else len(delay_shape)
    work = np.zeros((users, T))
    writes = np.zeros(users)
    start = np.zeros(users)
    entered = np.zeros(users)
    uid = np.zeros(users, dtype=np.int64)
    pending_writes: list[list[int]] = [[] for _ in range(users)]
    writing = np.zeros(users, dtype=bool)
    rr = [0] * T
    horizon = warmup + duration
    if stalls and stall_cycle > 0:
        for c in range(int(horizon // stall_cycle) + 1):
            t0 = c * stall_cycle
            for k, r, a, b in stalls:
                for j in range(len(reps[k])) if r is None else [r]:
                    heapq.heappush(events, (t0 + a, next(seq), STALL, k, j, 1))
                    heapq.heappush(events, (t0 + b, next(seq), STALL, k, j, -1))
    rts: list[float] = []
    busy0: list[list[float]] | None = None
    rec = SimTrace() if trace else None
    next_uid = itertools.count()
    last_busy = [[0.0] * len(row) for row in reps]
    if rec is not None:
        heapq.heappush(events, (sample, next(seq), SAMPLE, 0, 0, 0))
    all_reps = [(k, r, rep) for k, row in enumerate(reps) for r, rep in enumerate(row)]
    # host sharing: the share of the running tasks now, how many there are, and since when;
    # task-seconds wanted and core-seconds got after the warm-up
    host = {"share": 1.0, "n": 0.0, "t": 0.0, "wanted": 0.0, "got": 0.0, "others": 0.0}
    running = [[0.0] * len(row) for row in reps]  # each replica's running tasks

    def rebalance(now: float) -> None:
        """After the events at ``now``: the running tasks' share of the host's cores."""
        assert host_cores is not None
        n = host["n"]
        for k, r in changed:  # (whole numbers of tasks: the sum stays exact)
            speed = reps[k][r].speed()
            n += speed - running[k][r]
            running[k][r] = speed
        changed.clear()
        span = now - max(host["t"], warmup)
        if span > 0:
            host["wanted"] += span * host["n"]
            host["got"] += span * host["n"] * host["share"]
            # the other processes' tasks get the same share, or the cores when alone
            alone = min(host_background, host_cores)
            host["others"] += span * (host_background * host["share"] if host["n"] else alone)
        host["t"] = now
        if n == host["n"] and n > 0:
            return  # (same tasks, same share)
        host["n"] = n
        if n <= 0:
            return  # nothing runs: the share is set when something does
        share = min(1.0, host_cores / (host_background + n))
        if share == host["share"]:
            return
        for k, r, rep in all_reps:
            if rep.speed() > 0:  # (a replica running nothing has no event to move)
                rep.advance(now)  # at the old share up to now
                rep.share = share
                schedule(k, r, now)
            else:
                rep.share = share
        host["share"] = share

    def think() -> float:
        if think_time <= 0:
            return 0.0
        return float(rng.exponential(think_time)) if think_dist == "exp" else think_time

    for u in range(users):
        heapq.heappush(events, (think(), next(seq), ARRIVE, u, 0, 0))

    def pick(k: int) -> int:
        row = reps[k]
        if len(row) == 1:
            return 0
        if k == 0:
            rr[0] = (rr[0] + 1) % len(row)
            return rr[0]
        loads = [len(rep) for rep in row]
        best = min(loads)
        choices = [i for i, v in enumerate(loads) if v == best]
        rr[k] = (rr[k] + 1) % len(choices)
        return choices[rr[k]]

    def join(u: int, k: int, r: int, amount: float, now: float, write: bool = False) -> None:
        entered[u] = now
        writing[u] = write
        rep = reps[k][r]
        rep.advance(now)
        rep.add(u, amount)
        schedule(k, r, now)

    def enter(u: int, k: int, now: float) -> None:
        while k < T and work[u, k] <= 0:  # tiers this request does not use
            k += 1
        if k == T:
            if delay > 0:
                d = delay if delay_shape is None else delay * delay_shape[rng.integers(n_shape)]
                heapq.heappush(events, (now + d, next(seq), LEAVE, u, 0, 0))
            else:
                leave(u, now)
            return
        if tiers[k].write_all and len(reps[k]) > 1 and writes[u] > 0:
            # the reads at one replica, then the write at every replica in turn
            pending_writes[u] = list(range(len(reps[k])))
            read = work[u, k] - writes[u]
            if read > _EPS:
                join(u, k, pick(k), read, now)
            else:
                join(u, k, pending_writes[u].pop(0), writes[u], now, write=True)
            return
        join(u, k, pick(k), work[u, k], now)

    def leave(u: int, now: float) -> None:
        if now >= warmup:
            rts.append(now - start[u])
        if rec is not None:
            rec.requests.append((int(uid[u]), float(start[u]), now))
        heapq.heappush(events, (now + think(), next(seq), ARRIVE, u, 0, 0))

    now = 0.0
    while events:
        if host_cores is not None:
            rebalance(now)  # what the previous event changed, at its time
        now, _, kind, a, b, version = heapq.heappop(events)
        if now > horizon:
            break
        if busy0 is None and now >= warmup:
            for row in reps:
                for rep in row:
                    rep.advance(now)
            busy0 = [[rep.busy for rep in row] for row in reps]
        if kind == REPLICA:
            rep = reps[a][b]
            if version != rep.version:
                continue
            rep.advance(now)
            done = rep.fire(rep.next_kind)
            schedule(a, b, now)
            if done is None:
                continue
            u = done
            if rec is not None:
                rec.visits.append((int(uid[u]), a, b, float(entered[u]), now, bool(writing[u])))
            if pending_writes[u]:
                join(u, a, pending_writes[u].pop(0), writes[u], now, write=True)
            else:
                enter(u, a + 1, now)
        elif kind == ARRIVE:
            u = a
            start[u] = now
            uid[u] = next(next_uid)
            if n_samples:
                i = int(rng.integers(n_samples))
                work[u] = demand_samples[i]  # type: ignore[index]
                writes[u] = 0.0 if write_fraction is None else write_fraction[i] * work[u, -1]
            else:
                work[u] = rng.exponential(demand_means)
                writes[u] = 0.0
            pending_writes[u] = []
            enter(u, 0, now)
        elif kind == LEAVE:
            leave(a, now)
        elif kind == STALL:
            rep = reps[a][b]
            rep.advance(now)
            rep.frozen += version  # +1 at the start, -1 at the end
            schedule(a, b, now)
        elif kind == REFILL:
            rep = reps[a][b]
            rep.advance(now)
            rep.refill(count=now >= warmup + rep.period)
            heapq.heappush(events, (now + rep.period, next(seq), REFILL, a, b, 0))
            schedule(a, b, now)
        else:  # SAMPLE
            assert rec is not None
            for k, row in enumerate(reps):
                for r, rep in enumerate(row):
                    rep.advance(now)
                    rec.cpu.append((k, r, now, (rep.busy - last_busy[k][r]) / sample))
                    last_busy[k][r] = rep.busy
            heapq.heappush(events, (now + sample, next(seq), SAMPLE, 0, 0, 0))
    end = min(now, horizon)
    for row in reps:
        for rep in row:
            rep.advance(end)
    host_share = host_busy = None
    if host_cores is not None:
        rebalance(end)
        host_share = host["got"] / host["wanted"] if host["wanted"] > 0 else 1.0
        host_busy = (host["got"] + host["others"]) / max(end - warmup, _EPS)
    span = max(end - warmup, _EPS)
    util, throttled = {}, {}
    for k, tier in enumerate(tiers):
        before = 0.0 if busy0 is None else sum(busy0[k])
        util[tier.name] = (sum(rep.busy for rep in reps[k]) - before) / span
        periods = sum(rep.periods for rep in reps[k])
        if tier.quota is not None and periods:
            throttled[tier.name] = sum(rep.throttled for rep in reps[k]) / periods
    return SimOutcome(
        users=users,
        throughput=len(rts) / span,
        response_times=np.asarray(rts),
        utilization=util,
        simulated=span,
        throttled=throttled,
        trace=rec,
        host_share=host_share,
        host_busy=host_busy,
    )


__all__ = ["SimOutcome", "SimTier", "SimTrace", "simulate_closed"]
