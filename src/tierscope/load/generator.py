"""The Python face of the native load generator: configure once, start levels, watch, collect.

Design decision (after polars): Python owns the signature, the defaults and every check of user
input; the native ``LoadRun`` only runs. ``LoadGenerator.start`` returns at once with a
:class:`LoadHandle` while the load runs on native threads without the GIL, so the caller (the
CLI's progress view, the experiment runner's monitors) stays free. ``stop`` and ``wait`` return a
:class:`LoadResult` with everything measured so far, and leave no thread or socket behind.

Every time handed to Python is CLOCK_MONOTONIC seconds, the clock of ``time.monotonic()``.
"""

from __future__ import annotations

import json
import resource
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tierscope import __version__
from tierscope.errors import InputError, TierscopeError
from tierscope.load import _frames
from tierscope.load._compile import LEVEL_UNITS, native_config, targets_of
from tierscope.load._summary import summary_doc
from tierscope.spec.workload import Workload

#: Seconds a native wait lasts before Python looks for Ctrl-C again.
_WAIT_SLICE_S = 0.1
#: Default bound on open-mode requests in flight or waiting (also capped by the fd limit).
MAX_OUTSTANDING = 10_000
#: Scheduling priorities of the generator threads (see LoadGenerator).
PRIORITIES = ("realtime", "high", "normal")


def _fd_headroom() -> int:
    try:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    except (OSError, ValueError):
        return MAX_OUTSTANDING
    if hard == resource.RLIM_INFINITY:
        return MAX_OUTSTANDING
    return max(1, int(hard) - 256)


@dataclass(frozen=True)
class LoadSnapshot:
    """Live view of a running load (for progress displays). Times in seconds."""

    elapsed: float
    phase: str
    sent: int
    completed: int
    errors: int
    outstanding: int
    active: int
    connections: int
    #: Responses per second and latency quantiles over about the last second.
    throughput: float | None
    p50: float | None
    p95: float | None
    p99: float | None
    #: Cores the generator threads used since the previous snapshot.
    client_cpu: float | None
    #: Largest timer lateness over about the last second.
    lag_max: float
    late: int
    not_sent: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class LoadResult:
    """Everything one load run measured.

    ``summary`` is the ``tierscope load --json`` document; ``requests`` has one row per request
    (store ``requests`` columns, tier ``client``, plus ``intended_start``, ``actual_start``,
    ``bytes``, ``phase``, ``error``, ``user``, ``session``); ``client_samples`` is the
    generator's own CPU, timer lag and progress per sample interval.
    """

    summary: dict[str, Any]
    requests: pl.DataFrame
    client_samples: pl.DataFrame
    setup: str = "load"
    level: float = 0.0
    rep: int = 0

    @property
    def partial(self) -> bool:
        """Whether the run was stopped early or failed."""
        return bool(self.summary.get("partial"))

    def point(self) -> dict[str, Any]:
        """The run's row of the store's ``points`` table (steady window)."""
        s = self.summary
        lat = s["latency"]
        return {
            "setup": self.setup,
            "level": float(self.level),
            "rep": int(self.rep),
            "t_start": s["steady"]["start"],
            "t_end": s["steady"]["end"],
            "throughput": s["throughput"],
            "rt_mean": lat["mean"],
            "rt_p50": lat["p50"],
            "rt_p95": lat["p95"],
            "rt_p99": lat["p99"],
            "errors": float(s["errors"]),
            "client.cpu_cores": s["client_cpu"],
            "client.timer_lag_p99": s["lag"]["p99"],
            "client.bottleneck": float(s["client_bottleneck"]),
        }

    def client_metrics(self) -> pl.DataFrame:
        """``client_samples`` in the store's long ``metrics`` format (tier ``client``)."""
        return _frames.client_metrics(
            self.client_samples, setup=self.setup, level=self.level, rep=self.rep
        )


class LoadGenerator:
    """Offers a workload to HTTP servers from native threads.

    ``base_urls`` are the servers relative interaction URLs go to (users and sessions are
    spread over them round-robin); empty means the workload's own ``base_url``.
    ``connections`` shares that many connections among all users (default: one connection
    per user or session, and as many as needed in open mode, up to ``max_outstanding``).
    ``keep_requests=False`` keeps only the rows not already handed out by
    ``LoadHandle.take_requests()`` in ``LoadResult.requests`` (for streaming to a store).
    ``threads`` worker threads share the users (one is enough up to tens of thousands of
    requests per second).

    ``priority`` is how the generator threads ask for CPU, best effort (privileges permitting):
    ``"realtime"`` (default) puts them in the real-time FIFO class while the workload has timers
    (think times, arrivals) and each thread stays under half a core, so a busy machine cannot
    make them send late (measured here: p99 lateness 6 ms at nice -10 on a saturated machine,
    0.06 ms in real time); a thread that needs more drops to ``"high"`` (nice -10), as does a
    closed loop without think time. ``"normal"`` changes nothing.
    """

    def __init__(
        self,
        workload: Workload,
        base_urls: Sequence[str] = (),
        *,
        seed: int = 1,
        connections: int | None = None,
        timeout_s: float = 10.0,
        threads: int = 1,
        max_outstanding: int | None = None,
        request_id_prefix: str = "",
        late_threshold_s: float = 0.002,
        sample_interval_s: float = 0.05,
        keep_requests: bool = True,
        check_reachable: bool = True,
        priority: str = "realtime",
        user_agent: str = f"tierscope/{__version__}",
    ) -> None:
        self.workload = workload
        self.base_urls = list(base_urls)
        self.seed = seed
        self.connections = connections
        self.timeout_s = timeout_s
        self.threads = threads
        self.max_outstanding = max_outstanding
        self.request_id_prefix = request_id_prefix
        self.late_threshold_s = late_threshold_s
        self.sample_interval_s = sample_interval_s
        self.keep_requests = keep_requests
        self.check_reachable = check_reachable
        self.priority = priority
        self.user_agent = user_agent

    def _check(self) -> None:
        def positive(name: str, value: float, *, integer: bool = False) -> None:
            ok = value > 0 and (not integer or float(value).is_integer())
            if not ok or value != value or value == float("inf"):
                kind = "an integer >= 1" if integer else "a number > 0"
                raise InputError(name, value, kind)

        if self.connections is not None:
            positive("connections", self.connections, integer=True)
        positive("timeout_s", self.timeout_s)
        positive("threads", self.threads, integer=True)
        if self.threads > 256:
            raise InputError("threads", self.threads, "at most 256")
        if self.max_outstanding is not None:
            positive("max_outstanding", self.max_outstanding, integer=True)
        positive("sample_interval_s", self.sample_interval_s)
        if not self.late_threshold_s >= 0:
            raise InputError("late_threshold_s", self.late_threshold_s, "a number >= 0")
        if self.priority not in PRIORITIES:
            raise InputError("priority", self.priority, "one of " + ", ".join(PRIORITIES))
        if any(c.isspace() or not c.isprintable() for c in self.request_id_prefix):
            raise InputError("request_id_prefix", self.request_id_prefix, "printable, no spaces")

    def start(
        self,
        level: float | None = None,
        ramp_up_s: float = 0.0,
        steady_s: float = 10.0,
        ramp_down_s: float = 0.0,
        *,
        setup: str = "load",
        rep: int = 0,
        start_at: float | None = None,
    ) -> LoadHandle:
        """Start offering load and return at once.

        ``level`` is users (closed), requests/s (open) or sessions/s (partly open); None uses
        the workload's ``users``/``rate``/``session_rate``. The load ramps linearly from 0 over
        ``ramp_up_s``, holds for ``steady_s`` (the only window the summary covers) and ramps
        down over ``ramp_down_s``. ``start_at`` (``time.monotonic()`` seconds) delays the start.
        """
        self._check()
        w = self.workload
        if level is None:
            level = w.default_level()
            if level is None:
                what = {"closed": "users", "open": "rate", "partly-open": "session_rate"}[w.mode]
                raise InputError(
                    "level", None, f"a load level ({what} in the workload, or given to start())"
                )
        unit = LEVEL_UNITS[w.mode]
        # No load, or no steady window, would make a run that measured nothing.
        if not (level > 0 and level != float("inf")):
            raise InputError("level", level, f"a number of {unit} > 0")
        if w.mode == "closed" and not float(level).is_integer():
            raise InputError("level", level, "a whole number of users")
        for name, value in (("ramp_up_s", ramp_up_s), ("ramp_down_s", ramp_down_s)):
            if not (value >= 0 and value != float("inf")):
                raise InputError(name, value, "a duration in seconds >= 0")
        if not (steady_s > 0 and steady_s != float("inf")):
            raise InputError("steady_s", steady_s, "a steady window (--duration) of seconds > 0")
        targets, fixed = targets_of(w, self.base_urls)
        n_base = len(self.base_urls or w.base_urls)
        if self.check_reachable:
            _check_reachable(targets, self.timeout_s)
        max_outstanding = self.max_outstanding or min(MAX_OUTSTANDING, _fd_headroom())
        options = {
            "connections": self.connections,
            "max_outstanding": int(max_outstanding),
            # Each session has its own connection unless they share: never more than fit.
            "max_sessions": w.max_sessions
            or (_fd_headroom() if w.mode == "partly-open" and not self.connections else None),
            "timeout_s": float(self.timeout_s),
            "threads": int(self.threads),
            "seed": int(self.seed),
            "request_id_prefix": self.request_id_prefix,
            "late_threshold_s": float(self.late_threshold_s),
            "sample_interval_s": float(self.sample_interval_s),
            "keep_records": True,
            "user_agent": self.user_agent,
            "start_at": start_at,
            "priority": self.priority,
        }
        config = native_config(
            w, targets, fixed, n_base=n_base, level=level, ramp_up_s=ramp_up_s,
            steady_s=steady_s, ramp_down_s=ramp_down_s, options=options,
        )  # fmt: skip
        from tierscope import _native

        try:
            run = _native.LoadRun(json.dumps(config))
        except ValueError as exc:
            # Python checked the input already; what is left is what only the engine can
            # know, such as the open-files limit. Its message names the configuration field.
            text = str(exc).removeprefix("invalid load configuration: ")
            field_, _, msg = text.removeprefix("invalid simulation spec: ").partition(": ")
            raise InputError(field_, config.get(field_), msg or text) from None
        facts = {
            "mode": w.mode,
            "level": float(level),
            "level_unit": unit,
            "workload": w.name,
            "mix": w.mix_name,
            "targets": [t.url for t in targets],
            "threads": int(self.threads),
            "connections": self.connections,
            "seed": int(self.seed),
            "setup": setup,
            "rep": int(rep),
        }
        return LoadHandle(
            run,
            facts=facts,
            interactions=[i.name for i in w.interactions],
            id_prefix=self.request_id_prefix,
            keep_requests=self.keep_requests,
            late_threshold_s=self.late_threshold_s,
        )


def _check_reachable(targets: Sequence[Any], timeout_s: float) -> None:
    for t in targets:
        host, _, port = t.addr.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), min(timeout_s, 3.0)):
                pass
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise InputError("url", t.url, f"a reachable HTTP server ({reason})") from None


@dataclass
class _Taken:
    frames: list[pl.DataFrame] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)


class LoadHandle:
    """A running load; ``snapshot()`` while it runs, ``wait()`` or ``stop()`` for the result."""

    def __init__(
        self,
        run: Any,
        *,
        facts: dict[str, Any],
        interactions: list[str],
        id_prefix: str,
        keep_requests: bool,
        late_threshold_s: float,
    ) -> None:
        self._run = run
        self._facts = facts
        self._interactions = interactions
        self._id_prefix = id_prefix
        self._keep = keep_requests
        self._late_threshold_s = late_threshold_s
        self._taken = _Taken()
        self._lock = threading.Lock()
        self._result: LoadResult | None = None
        self._stopped_at: float | None = None
        self.t0, self.steady_start, self.steady_end, self.load_end = run.times()
        self._last_cpu = (self.t0, 0.0)

    @property
    def done(self) -> bool:
        """Whether the load has finished (or been stopped)."""
        return bool(self._run.done)

    def snapshot(self) -> LoadSnapshot:
        """Counters, last-second throughput and latency, the generator's CPU and lag."""
        s = self._run.snapshot()
        now = s["now"]
        if s["done"]:
            phase = "done"
        elif now < self.t0:
            phase = "starting"
        elif now < self.steady_start:
            phase = "ramp-up"
        elif now < self.steady_end:
            phase = "steady"
        elif now < self.load_end:
            phase = "ramp-down"
        else:
            phase = "draining"
        t_prev, cpu_prev = self._last_cpu
        cpu = None
        if now > t_prev and now > self.t0:
            cpu = (s["cpu_s"] - cpu_prev) / (now - max(t_prev, self.t0))
        self._last_cpu = (now, s["cpu_s"])
        recent = s["recent"]
        window = min(1.0, max(now - self.t0, 1e-9))

        def q(key: str) -> float | None:
            v = recent[key]
            return None if v != v else float(v)

        return LoadSnapshot(
            elapsed=now - self.t0,
            phase=phase,
            sent=s["sent"],
            completed=s["completed"],
            errors=s["errors"],
            outstanding=s["outstanding"],
            active=s["active"],
            connections=s["connections"],
            throughput=recent["count"] / window if now > self.t0 else None,
            p50=q("p50"),
            p95=q("p95"),
            p99=q("p99"),
            client_cpu=cpu,
            lag_max=s["lag_max"],
            late=s["late"],
            not_sent=s["not_sent"],
        )

    def join(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the end (without the GIL); True once it has ended."""
        return bool(self._run.wait(max(0.0, float(timeout_s))))

    def take_requests(self) -> pl.DataFrame:
        """Request rows finished since the last call (for streaming them to a store)."""
        with self._lock:
            return self._take_locked()

    def _take_locked(self) -> pl.DataFrame:
        self._taken.samples.append(self._run.take_samples())
        frame = _frames.requests_frame(
            self._run.take_records(),
            self._interactions,
            id_prefix=self._id_prefix,
            setup=self._facts["setup"],
            level=self._facts["level"],
            rep=self._facts["rep"],
        )
        if self._keep and frame.height:
            self._taken.frames.append(frame)
        return frame

    def stop(self) -> LoadResult:
        """Stop now (in-flight requests are recorded as aborted) and return what was measured."""
        if self._stopped_at is None and not self.done:
            self._stopped_at = time.monotonic()
        self._run.stop()
        return self._finish()

    def wait(self) -> LoadResult:
        """Wait for the end of the load and return the result.

        Ctrl-C (KeyboardInterrupt) stops the generator before propagating; ``stop()`` then
        returns the partial result.
        """
        try:
            while not self._run.wait(_WAIT_SLICE_S):
                pass
        except KeyboardInterrupt:
            self._stopped_at = time.monotonic()
            self._run.stop()
            self._run.wait(None)
            raise
        return self._finish()

    def _finish(self) -> LoadResult:
        with self._lock:
            if self._result is not None:
                return self._result
            self._run.wait(None)
            last = self._take_locked()
            native = self._run.summary()
            if native is None:  # pragma: no cover - wait(None) guarantees the end
                raise TierscopeError("load generator did not finish")
            raw = _frames.raw_samples(self._taken.samples)
            summary = summary_doc(
                native,
                raw,
                times=(self.t0, self.steady_start, self.steady_end, self.load_end),
                stopped_at=self._stopped_at if native["stopped"] else None,
                facts=self._facts,
                interactions=self._interactions,
                late_threshold_s=self._late_threshold_s,
                failure=self._run.failure(),
            )
            frames = self._taken.frames if self._keep else [last]
            requests = (
                pl.concat(frames, how="vertical")
                if frames
                else _frames.requests_frame(
                    {"n": 0}, self._interactions, id_prefix="", setup="", level=0, rep=0
                )
            )
            self._taken.frames = []
            self._result = LoadResult(
                summary=summary,
                requests=requests,
                client_samples=_frames.client_samples(raw),
                setup=self._facts["setup"],
                level=self._facts["level"],
                rep=self._facts["rep"],
            )
            return self._result
