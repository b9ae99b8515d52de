"""One YCSB client of a Cassandra load run, in a process of its own
(``python -I -m tierscope.load.cassandra_worker CONFIG.json``), on the DataStax Python driver.

A **client** offers YCSB operations (read, update, insert, scan, read-modify-write) on its
share of the level: closed users (each issues its next operation when the previous one
answered, after an exponential think time), open arrivals on a schedule fixed before it
starts (Poisson or evenly spaced, ramped like the HTTP load), or partly-open sessions
(arriving on such a schedule, each a geometric number of operations in a row). Keys follow
YCSB: ``user`` and the FNV-1a hash of the record number, chosen zipfian (YCSB's constant
0.99, scrambled over the records), uniform, or latest (zipfian over the most recent inserts);
inserts add records past the loaded ones, numbered apart per client. Every operation is
asynchronous (``execute_async``) and timed from its intended start, so a client that falls
behind its schedule counts the wait the system imposed (no coordinated omission); a
read-modify-write is one operation from its read's start to its write's answer.

A **loader** inserts its share of the records before the sweep, 64 at a time, at consistency
ALL (every replica has every row before the first read).

Records go to binary files of fixed-size rows (:data:`OPS_ROW`), appended every quarter of a
second, so whatever happens the parent keeps what was measured up to then. Times are
``CLOCK_MONOTONIC`` seconds, the runner's clock. SIGTERM stops the client: it issues nothing
more, waits briefly for what is in flight, writes what it has and exits.
"""

from __future__ import annotations

import heapq
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from tierscope.load._records import FLUSH_EVERY_S, Appender, run_worker, schedule, stop_flag

OPS = ("read", "update", "insert", "scan", "readmodifywrite")
#: status codes of a record: 0 ok, else the index of the driver's error here
ERRORS = ("ok", "read_timeout", "write_timeout", "unavailable", "overloaded", "timeout",
          "no_host", "error")  # fmt: skip
OPS_ROW = np.dtype(
    [("seq", "<i8"), ("op", "u1"), ("coordinator", "i1"), ("status", "<i2"), ("user", "<i4"),
     ("intended", "<f8"), ("sent", "<f8"), ("end", "<f8")]
)  # fmt: skip
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 1099511628211
ZIPF_THETA = 0.99
TABLE = "usertable"
LOAD_CONCURRENCY = 64
LOAD_STEP = 2000
LOAD_TRIES = 5


def fnv_hash(n: int) -> int:
    """YCSB's ``Utils.fnvhash64``: FNV-1a over the 8 bytes of ``n``, made non-negative."""
    h = FNV_OFFSET
    for _ in range(8):
        h ^= n & 0xFF
        n >>= 8
        h = (h * FNV_PRIME) & 0xFFFF_FFFF_FFFF_FFFF
    h -= (h >> 63) << 64  # as a signed long
    return abs(h)


def key(n: int) -> str:
    """The key of record ``n`` (YCSB's hashed ``user`` keys)."""
    return f"user{fnv_hash(n)}"


class Keys:
    """Record numbers for the operations of one client (see the module)."""

    def __init__(self, records: int, distribution: str, rng: np.random.Generator, *,
                 index: int, clients: int) -> None:  # fmt: skip
        self.records, self.distribution, self.rng = records, distribution, rng
        self.index, self.clients = index, clients
        self.inserted = 0  # this client's inserts so far
        if distribution in ("zipfian", "latest"):
            weights = np.arange(1, records + 1, dtype=float) ** -ZIPF_THETA
            self.cdf = np.cumsum(weights)
            self.cdf /= self.cdf[-1]

    def _rank(self) -> int:
        return int(np.searchsorted(self.cdf, self.rng.random(), side="right"))

    @property
    def newest(self) -> int:
        """The highest record number known to exist (the loaded ones and this client's)."""
        return self.records - 1 + self.inserted * self.clients

    def existing(self) -> int:
        if self.distribution == "uniform":
            return int(self.rng.integers(0, self.newest + 1))
        if self.distribution == "latest":
            return max(0, self.newest - self._rank())
        return fnv_hash(self._rank()) % self.records  # zipfian, scrambled

    def new(self) -> int:
        n = self.records + self.index + self.inserted * self.clients
        self.inserted += 1
        return n


def _error_code(exc: BaseException) -> int:
    name = type(exc).__name__
    table = {"ReadTimeout": 1, "WriteTimeout": 2, "Unavailable": 3, "OverloadedErrorMessage": 4,
             "OperationTimedOut": 5, "NoHostAvailable": 6}  # fmt: skip
    return table.get(name, len(ERRORS) - 1)


def connect(cfg: dict[str, Any]) -> tuple[Any, Any]:
    """A driver session on the cluster with the routing asked for."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.connection import DefaultEndPoint
    from cassandra.policies import RoundRobinPolicy, TokenAwarePolicy

    policy = RoundRobinPolicy()
    if cfg["routing"] == "token-aware":
        policy = TokenAwarePolicy(policy, shuffle_replicas=True)
    profile = ExecutionProfile(load_balancing_policy=policy, request_timeout=cfg["timeout_s"])
    cluster = Cluster(
        contact_points=[DefaultEndPoint(h, int(p)) for h, p in cfg["contact_points"]],
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=10,
    )
    return cluster, cluster.connect(cfg["keyspace"])


class Client:
    """Issues the operations of one client and records them (see the module)."""

    def __init__(self, cfg: dict[str, Any], session: Any, hosts: dict[str, int]) -> None:
        from cassandra import ConsistencyLevel

        self.cfg, self.session, self.hosts = cfg, session, hosts
        self.rng = np.random.default_rng(int(cfg["seed"]))
        self.keys = Keys(int(cfg["records"]), cfg["distribution"], self.rng,
                         index=int(cfg["index"]), clients=int(cfg["clients"]))  # fmt: skip
        ops = cfg["mix"]
        self.ops = [OPS.index(op) for op in ops]
        self.op_cdf = np.cumsum([ops[op] for op in ops])
        self.fields = int(cfg["field_count"])
        pool = self.rng.integers(ord("a"), ord("z") + 1, (256, int(cfg["field_length"])))
        self.values = ["".join(map(chr, row)) for row in pool]
        level = {k: getattr(ConsistencyLevel, v.upper()) for k, v in cfg["consistency"].items()}
        cols = ", ".join(f"field{i}" for i in range(self.fields))
        marks = ", ".join("?" for _ in range(self.fields + 1))

        def prepare(cql: str, op: str) -> Any:
            stmt = session.prepare(cql)
            stmt.consistency_level = level[op]
            return stmt

        self.read = prepare(f"SELECT * FROM {TABLE} WHERE y_id = ?", "read")
        self.scan = prepare(f"SELECT * FROM {TABLE} WHERE token(y_id) >= token(?) LIMIT ?", "scan")
        self.updates = [prepare(f"UPDATE {TABLE} SET field{i} = ? WHERE y_id = ?", "update")
                        for i in range(self.fields)]  # fmt: skip
        self.insert = prepare(f"INSERT INTO {TABLE} (y_id, {cols}) VALUES ({marks})", "insert")
        self.max_scan = int(cfg["max_scan_length"])
        self.rows: list[tuple[int, int, int, int, int, float, float, float]] = []
        self.seq = 0
        self.in_flight = 0
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.due: list[tuple[float, int, int]] = []  # (time, tie, user) of closed users' next ops

    # ---- one operation ---------------------------------------------------------------------
    def _value(self) -> str:
        return self.values[int(self.rng.integers(len(self.values)))]

    def _statement(self, op: int) -> Any:
        name = OPS[op]
        if name == "read" or name == "readmodifywrite":
            return self.read.bind((key(self.keys.existing()),))
        if name == "scan":
            length = int(self.rng.integers(1, self.max_scan + 1))
            return self.scan.bind((key(self.keys.existing()), length))
        if name == "update":
            return self._update(key(self.keys.existing()))
        values = [self._value() for _ in range(self.fields)]
        return self.insert.bind((key(self.keys.new()), *values))

    def _update(self, k: str) -> Any:
        return self.updates[int(self.rng.integers(self.fields))].bind((self._value(), k))

    def issue(self, user: int, intended: float) -> None:
        """Send the next operation (of ``user``, -1 for an open arrival) due at ``intended``."""
        with self.lock:
            seq = self.seq
            self.seq += 1
            op = self.ops[int(np.searchsorted(self.op_cdf, self.rng.random(), side="right"))
                          if len(self.ops) > 1 else 0]  # fmt: skip
            stmt = self._statement(op)
            self.in_flight += 1
        sent = time.monotonic()
        try:
            fut = self.session.execute_async(stmt)
        except Exception as exc:
            self._done(seq, op, -1, _error_code(exc), user, intended, sent)
            return
        self._follow(fut, seq, op, user, intended, sent, last=OPS[op] != "readmodifywrite")

    def _follow(self, fut: Any, seq: int, op: int, user: int, intended: float, sent: float, *,
                last: bool) -> None:  # fmt: skip
        """Record the operation when ``fut`` answers (``last``: its last request)."""
        args = (fut, seq, op, user, intended, sent, last)
        fut.add_callbacks(self._answered, self._failed, callback_args=args, errback_args=args)

    def _coordinator(self, fut: Any) -> int:
        host = getattr(fut, "coordinator_host", None) or getattr(fut, "_current_host", None)
        if host is None:
            return -1
        return self.hosts.get(str(getattr(host, "address", host)), -1)

    def _answered(self, rows: Any, fut: Any, seq: int, op: int, user: int, intended: float,
                  sent: float, last: bool) -> None:  # fmt: skip
        if not last:  # a read-modify-write's read: now write the record it read
            first = rows[0] if rows else None
            with self.lock:
                stmt = self._update(first.y_id if first is not None else key(self.keys.newest))
            try:
                again = self.session.execute_async(stmt)
            except Exception as exc:
                self._done(seq, op, self._coordinator(fut), _error_code(exc), user, intended, sent)
                return
            self._follow(again, seq, op, user, intended, sent, last=True)
            return
        self._done(seq, op, self._coordinator(fut), 0, user, intended, sent)

    def _failed(self, exc: BaseException, fut: Any, seq: int, op: int, user: int,
                intended: float, sent: float, last: bool) -> None:  # fmt: skip
        self._done(seq, op, self._coordinator(fut), _error_code(exc), user, intended, sent)

    def _done(self, seq: int, op: int, coordinator: int, status: int, user: int,
              intended: float, sent: float) -> None:  # fmt: skip
        end = time.monotonic()
        with self.lock:
            self.rows.append((seq, op, coordinator, status, user, intended, sent, end))
            self.in_flight -= 1
            if user >= 0:  # a closed user or a session goes on
                nxt = self.next_of(user, end)
                if nxt is not None:
                    heapq.heappush(self.due, (nxt, seq, user))
            self.wake.notify()

    def next_of(self, user: int, end: float) -> float | None:
        """When ``user`` issues its next operation after one that ended at ``end`` (None: it
        is done); set by the mode (closed users, partly-open sessions)."""
        return None

    def take_rows(self) -> np.ndarray:
        with self.lock:
            rows, self.rows = self.rows, []
        return np.array(rows, dtype=OPS_ROW)


class ClosedClient(Client):
    """``users`` closed users, starting apart over the ramp-up and leaving apart over the
    ramp-down, each thinking an exponential time of mean ``think_time`` between operations."""

    def __init__(self, cfg: dict[str, Any], session: Any, hosts: dict[str, int]) -> None:
        super().__init__(cfg, session, hosts)
        t0, n = float(cfg["t0"]), int(cfg["users"])
        up, steady, down = float(cfg["ramp_up"]), float(cfg["steady"]), float(cfg["ramp_down"])
        self.think = float(cfg["think_time"])
        self.leave = [t0 + up + steady + down * (n - u) / n for u in range(n)]
        self.due = [(t0 + up * u / n, -1 - u, u) for u in range(n)]
        heapq.heapify(self.due)

    def next_of(self, user: int, end: float) -> float | None:
        t = end + (self.rng.exponential(self.think) if self.think > 0 else 0.0)
        return t if t < self.leave[user] else None


class SessionClient(Client):
    """Partly open: sessions arrive on the schedule, each a geometric number of operations of
    mean ``session_length`` in a row."""

    def __init__(self, cfg: dict[str, Any], session: Any, hosts: dict[str, int]) -> None:
        super().__init__(cfg, session, hosts)
        self.go_on = 1.0 - 1.0 / float(cfg["session_length"])
        self.sessions = 0

    def next_of(self, user: int, end: float) -> float | None:
        return end if self.rng.random() < self.go_on else None


def run_client(cfg: dict[str, Any], stop: Any) -> None:
    out = Path(cfg["out"])
    name = f"client-{cfg['index']}"
    cluster, session = connect(cfg)
    hosts = {h: i for i, h in enumerate(cfg["hosts"])}
    mode = cfg["mode"]
    kind = {"closed": ClosedClient, "open": Client, "partly-open": SessionClient}[mode]
    client = kind(cfg, session, hosts)
    rows = Appender(out / f"{name}.ops")
    arrivals = np.empty(0)
    if mode != "closed":  # open arrivals, or session starts
        rate = float(cfg["rate"])
        arrivals = float(cfg["t0"]) + schedule(
            rate, float(cfg["ramp_up"]), float(cfg["steady"]), float(cfg["ramp_down"]),
            arrivals=cfg["arrivals"], seed=int(cfg["seed"]) * 31 + 7,
        ) if rate > 0 else arrivals  # fmt: skip
    nxt_arrival, session_id = 0, 0
    next_flush = time.monotonic() + FLUSH_EVERY_S
    mono = time.monotonic
    while not stop:
        now = mono()
        if now >= next_flush:
            rows.write(client.take_rows())
            next_flush = now + FLUSH_EVERY_S
        with client.lock:
            due_user = client.due[0][0] if client.due else None
        due_arrival = arrivals[nxt_arrival] if nxt_arrival < arrivals.size else None
        if due_user is None and due_arrival is None:
            # nothing more to issue unless what is in flight brings a user's next operation
            with client.lock:
                if client.in_flight == 0 and not client.due:
                    break
                client.wake.wait(0.05)
            continue
        t = min(x for x in (due_user, due_arrival) if x is not None)
        if t > now:
            with client.lock:
                client.wake.wait(min(t - now, FLUSH_EVERY_S))
            continue
        if due_arrival is not None and (due_user is None or due_arrival <= due_user):
            nxt_arrival += 1
            user = -1
            if mode == "partly-open":
                user, session_id = session_id, session_id + 1
            client.issue(user, float(due_arrival))
        else:
            with client.lock:
                _, _, user = heapq.heappop(client.due)
            client.issue(user, float(due_user))  # type: ignore[arg-type]
    # stopped or done: wait a little for what is in flight
    deadline = mono() + (2.0 if stop else float(cfg["timeout_s"]) + 1.0)
    while mono() < deadline:
        with client.lock:
            if client.in_flight == 0:
                break
            client.wake.wait(0.05)
    rows.write(client.take_rows())
    rows.close()
    cluster.shutdown()


def run_loader(cfg: dict[str, Any], stop: Any) -> None:
    """Insert records ``first`` to ``last`` - 1 (consistency ALL), counting them in
    ``loader-<i>.done``."""
    from cassandra import ConsistencyLevel
    from cassandra.concurrent import execute_concurrent_with_args

    out = Path(cfg["out"])
    cluster, session = connect(cfg)
    fields = int(cfg["field_count"])
    cols = ", ".join(f"field{i}" for i in range(fields))
    marks = ", ".join("?" for _ in range(fields + 1))
    stmt = session.prepare(f"INSERT INTO {TABLE} (y_id, {cols}) VALUES ({marks})")
    stmt.consistency_level = ConsistencyLevel.ALL
    rng = np.random.default_rng(int(cfg["seed"]))
    pool = rng.integers(ord("a"), ord("z") + 1, (256, int(cfg["field_length"])))
    values = ["".join(map(chr, row)) for row in pool]
    first, last = int(cfg["first"]), int(cfg["last"])
    done = 0
    for lo in range(first, last, LOAD_STEP):
        batch = [(key(n), *[values[(n * 7 + f) % len(values)] for f in range(fields)])
                 for n in range(lo, min(last, lo + LOAD_STEP))]  # fmt: skip
        for _ in range(LOAD_TRIES):  # a busy cluster may time a write out: send it again
            if stop or not batch:
                break
            results = execute_concurrent_with_args(session, stmt, batch,
                                                   concurrency=LOAD_CONCURRENCY,
                                                   raise_on_first_error=False)  # fmt: skip
            failed = [row for row, (ok, _) in zip(batch, results, strict=True) if not ok]
            done += len(batch) - len(failed)
            batch = failed
        if stop:
            break
        if batch:
            _, why = next(r for r in results if not r[0])
            raise RuntimeError(f"{len(batch)} records not written after {LOAD_TRIES} tries: {why}")
        (out / f"loader-{cfg['index']}.done").write_text(str(done))
    cluster.shutdown()


def main(argv: list[str]) -> int:
    stop = stop_flag()
    return run_worker(
        argv, lambda cfg: (run_loader if cfg["role"] == "loader" else run_client)(cfg, stop)
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
