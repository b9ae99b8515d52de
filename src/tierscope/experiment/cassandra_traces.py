"""Cassandra's probabilistic query tracing as the nodes' request records.

With ``system.tracing: p`` every node traces a share p of the requests it coordinates (what
``nodetool settraceprobability p`` sets, here over JMX): the coordinator and every replica it
asks write the request's steps to the ``system_traces`` keyspace (``sessions``, a row per
request; ``events``, a row per step with the node, its thread and the microseconds since the
node began its part). :class:`TraceCollector` reads the sessions that ended since its last
look and gives each node's parts of them as rows of the ``requests`` table (tier ``node``,
``request_id`` ``trace:<session>``, the same for every node's part of one request), one per
stage (:func:`trace_rows`):

* ``coordinate``: the coordinator's whole part, from the request's arrival to its answer;
* ``parse``: the coordinator's part before it asks the first replica, and ``end``, after the
  last replica answer it waited for (remote and quorum reads only);
* ``replica``: a replica's part of a read another node coordinates, from the request's arrival
  to its answer;
* ``read``: a replica read itself (the read stage's query of the table, local or not).

``detail`` holds the consistency level. The times are the nodes' own: microseconds since the
node began its part, placed on the host's clock by the event ids (time UUIDs, milliseconds),
so a stage's length is exact to the microsecond and its place to the millisecond.

Tracing costs the nodes writes to ``system_traces`` (a dozen rows per traced request): a small
share (0.01) keeps that small beside the requests themselves.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

import polars as pl

from tierscope.experiment.cassandra import STORAGE_SERVICE, CassandraCluster

__all__ = ["TraceCollector", "set_trace_probability", "trace_rows"]

#: A session is read once it ended this long ago (its last events are written asynchronously).
SETTLE_S = 1.0
#: Seconds between two reads of the sessions table.
REFRESH_S = 0.5
#: UUID v1 timestamps count 100 ns from 1582-10-15; Unix time from 1970-01-01.
_UUID_EPOCH = 0x01B21DD213814000


def set_trace_probability(cluster: CassandraCluster, probability: float) -> None:
    """Every node traces ``probability`` of the requests it coordinates (the StorageService's
    attribute ``TraceProbability``); OSError/ValueError when a node does not take it."""
    for node in cluster.nodes:
        write = {"type": "write", "mbean": STORAGE_SERVICE, "attribute": "TraceProbability",
                 "value": probability}  # fmt: skip
        body = json.dumps(write).encode()
        req = urllib.request.Request(node.jolokia_url, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5.0) as resp:  # loopback only
            answer = json.loads(resp.read())
        if not isinstance(answer, dict) or answer.get("status") != 200:
            raise ValueError(f"{node.name} refused the trace probability: {str(answer)[:200]}")


def _uuid_seconds(u: Any) -> float:
    """Unix seconds of a time UUID."""
    return (u.time - _UUID_EPOCH) / 1e7


@dataclass
class _Session:
    session_id: str
    coordinator: str
    started: float  # Unix seconds
    duration_us: int
    consistency: str | None
    events: list[tuple[str, str, int, str, float]]  # source, activity, elapsed µs, thread, Unix s


def _span(rows: list[dict[str, Any]], session: _Session, node: str, stage: str,
          anchor: float, a_us: float, b_us: float) -> None:  # fmt: skip
    if b_us >= a_us:
        rows.append({"node": node, "request_id": f"trace:{session.session_id}",
                     "interaction": stage, "start": anchor + a_us / 1e6,
                     "end": anchor + b_us / 1e6, "status": "ok",
                     "detail": session.consistency})  # fmt: skip


#: How the steps of a read begin (Cassandra 5.0's trace messages).
_ASKS = ("reading data from", "reading digest from", "Sending READ_REQ message")
_ANSWERS = ("READ_RSP message received", "Processing response from")
_READ_BEGINS, _READ_ENDS = "Executing single-partition query", "Read "


def trace_rows(sessions: Iterable[_Session], names: dict[str, str]) -> pl.DataFrame:
    """The stages of traced requests (see the module) as rows: ``node`` (its name, by its
    address in ``names``), ``request_id``, ``interaction``, ``start``, ``end`` (Unix seconds),
    ``status``, ``detail``."""
    rows: list[dict[str, Any]] = []
    for s in sessions:
        by_source: dict[str, list[tuple[str, int, str, float]]] = {}
        for source, activity, elapsed, thread, t in s.events:
            by_source.setdefault(source, []).append((activity, elapsed, thread, t))
        for source, events in by_source.items():
            node = names.get(source)
            if node is None:
                continue
            events.sort(key=lambda e: e[1])
            # when the node began its part: the event ids' clock (milliseconds, truncated)
            # less each event's elapsed microseconds; the latest is the closest
            anchor = max(t - elapsed / 1e6 for _, elapsed, _, t in events)
            if source == s.coordinator:
                anchor = max(anchor, s.started)
                _span(rows, s, node, "coordinate", anchor, 0, max(events[-1][1], s.duration_us))
                asks = [el for a, el, _, _ in events if a.startswith(_ASKS)]
                answers = [el for a, el, _, _ in events if a.startswith(_ANSWERS)]
                if asks and answers:
                    _span(rows, s, node, "parse", anchor, 0, min(asks))
                    _span(rows, s, node, "end", anchor, max(answers), s.duration_us)
            else:
                _span(rows, s, node, "replica", anchor, 0, events[-1][1])
            began = [el for a, el, _, _ in events if a.startswith(_READ_BEGINS)]
            ended = [el for a, el, _, _ in events if a.startswith(_READ_ENDS)]
            if began and ended:
                _span(rows, s, node, "read", anchor, min(began), max(ended))
    schema = {"node": pl.String, "request_id": pl.String, "interaction": pl.String,
              "start": pl.Float64, "end": pl.Float64, "status": pl.String,
              "detail": pl.String}  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


@dataclass
class TraceCollector:
    """Reads the cluster's new traced requests (see the module); :meth:`source` gives a node's
    rows for the node's ``request_sources`` (monotonic times). A read that fails (the nodes
    busy past the driver's timeout) is counted in :attr:`errors` and tried again at the next
    call: a trace is never worth a run."""

    cluster: CassandraCluster
    probability: float
    seen: set[str] = field(default_factory=set)
    pending: dict[str, list[pl.DataFrame]] = field(default_factory=dict)
    errors: int = 0
    last_error: str | None = None
    _session: Any = None
    _driver: Any = None
    _last: float = 0.0

    def start(self) -> TraceCollector:
        set_trace_probability(self.cluster, self.probability)
        return self

    def source(self, node: str) -> Callable[[], pl.DataFrame]:
        def rows() -> pl.DataFrame:
            self.refresh()
            parts = self.pending.pop(node, [])
            return pl.concat(parts) if parts else trace_rows([], {}).drop("node")

        return rows

    def refresh(self) -> None:
        """Read the sessions that ended at least :data:`SETTLE_S` ago and were not read."""
        now = time.monotonic()
        if now - self._last < REFRESH_S:
            return
        self._last = now
        names = {n.host: n.name for n in self.cluster.nodes}
        try:
            sessions = self._read()
        except Exception as exc:  # the driver's errors: traces are never worth a run
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            return
        frame = trace_rows(sessions, names)
        if frame.height:
            shift = time.time() - time.monotonic()  # Unix seconds -> monotonic
            frame = frame.with_columns(pl.col("start") - shift, pl.col("end") - shift)
            for (node,), part in frame.group_by("node"):
                self.pending.setdefault(str(node), []).append(part.drop("node"))

    def _read(self) -> list[_Session]:
        if self._session is None:
            from tierscope.load.cassandra import connect

            self._driver, self._session = connect(self.cluster.contact_points)
        rows = self._session.execute(
            "SELECT session_id, coordinator, started_at, duration, parameters "
            "FROM system_traces.sessions", timeout=30,
        )  # fmt: skip
        horizon = time.time() - SETTLE_S
        out = []
        for r in rows:
            sid = str(r.session_id)
            if sid in self.seen or r.duration is None or r.started_at is None:
                continue
            started = r.started_at.replace(tzinfo=UTC).timestamp()
            if started + r.duration / 1e6 > horizon:
                continue
            params = dict(r.parameters or {})
            self.seen.add(sid)
            if "system_traces" in params.get("query", ""):
                continue  # our own reading of the traces
            events = [
                (str(e.source), e.activity or "", int(e.source_elapsed or 0), e.thread or "",
                 _uuid_seconds(e.event_id))
                for e in self._session.execute(
                    "SELECT event_id, activity, source, source_elapsed, thread "
                    "FROM system_traces.events WHERE session_id = %s", [r.session_id], timeout=30,
                )
            ]  # fmt: skip
            level = params.get("consistency_level")
            out.append(_Session(sid, str(r.coordinator), started, int(r.duration),
                                level.lower() if level else None, events))  # fmt: skip
        return out

    def close(self) -> None:
        if self._driver is not None:
            self._driver.shutdown()
            self._driver = self._session = None
