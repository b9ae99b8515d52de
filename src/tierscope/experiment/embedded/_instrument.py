"""Instrumentation shared by the embedded tiers: gauges, request logs, CPU and I/O costs.

Design decisions:

* **Gauges live in a tiny memory-mapped file per process** (``*.gauges``), updated in place on
  every arrival and departure. The runner's monitor reads them at its own 50 ms ticks, so gauge
  samples share one time line with the cgroup and /proc readings, cost the tier nothing to
  publish, and stay exact (counters, not samples: queue length = arrivals - departures).
* **Request records are appended as CSV lines** (``request_id,interaction,start,end,status,
  detail``) by a background flusher, with ``time.monotonic()`` stamps: CLOCK_MONOTONIC is one
  clock for every process on the machine, so the runner aligns tiers, load generator and monitors
  without any clock synchronisation. The text fields come from clients (a request id is whatever
  the ``X-Request-Id`` header held), so they are written percent-encoded
  (:func:`encode_field`): no client string can add a field, a quote or a line to the table.
* **Configured costs are CPU time, not wall time**: :func:`burn` spins until the *thread's* CPU
  clock has advanced by the cost, so a throttled or preempted tier takes longer in wall time
  exactly as a real CPU-bound service would; :func:`write_io` writes and fsyncs real bytes.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, unquote

#: Slots of a gauge file, in order (int64 each). ``arrivals``/``departures`` count requests that
#: entered / left the process; ``active`` the requests being worked on by a worker; ``workers``
#: the pool size; ``pool_busy``/``pool_size`` the downstream connection pool; ``area_ns`` the
#: integral of the requests present (arrivals - departures) over CLOCK_MONOTONIC nanoseconds up
#: to ``changed_ns``, the last change: a reader gets the exact time average over any interval
#: (:func:`present_area_ns`), however late or unevenly it samples.
GAUGE_SLOTS = (
    "arrivals", "departures", "active", "workers", "pool_busy", "pool_size", "errors",
    "area_ns", "changed_ns",
)  # fmt: skip
_PRESENT = frozenset(("arrivals", "departures"))
_FMT = "<" + "q" * len(GAUGE_SLOTS)
GAUGE_BYTES = struct.calcsize(_FMT)
#: A reader's tries for two equal copies of a gauge file that is being written.
READ_TRIES = 8


class Gauges:
    """The writer side of a gauge file: counters updated in place (callers hold ``lock``)."""

    def __init__(self, path: str | os.PathLike[str], *, workers: int = 0, pool_size: int = 0):
        self.lock = threading.Lock()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, GAUGE_BYTES)
            self._map = mmap.mmap(fd, GAUGE_BYTES)
        finally:
            os.close(fd)
        self._values = dict.fromkeys(GAUGE_SLOTS, 0)
        self._values["workers"] = workers
        self._values["pool_size"] = pool_size
        self._values["changed_ns"] = time.monotonic_ns()
        self._publish()

    def _publish(self) -> None:
        # One copy of the packed bytes, not struct.pack_into: that first zeroes the slots it
        # writes, and a monitor reading between the two saw departures = 0 (a queue of 12 000).
        self._map[:GAUGE_BYTES] = struct.pack(_FMT, *self._values.values())

    def add(self, slot: str, delta: int = 1) -> None:
        with self.lock:
            v = self._values
            if slot in _PRESENT:
                now = time.monotonic_ns()
                v["area_ns"] += (v["arrivals"] - v["departures"]) * (now - v["changed_ns"])
                v["changed_ns"] = now
            v[slot] += delta
            self._publish()

    def set(self, slot: str, value: int) -> None:
        with self.lock:
            self._values[slot] = value
            self._publish()

    @contextmanager
    def count(self, slot: str) -> Iterator[None]:
        """``slot`` + 1 while the block runs."""
        self.add(slot, 1)
        try:
            yield
        finally:
            self.add(slot, -1)


def read_gauges(path: str | os.PathLike[str]) -> dict[str, int] | None:
    """The reader side (one ``pread``); None while the file is not there yet."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(GAUGE_BYTES)
    except FileNotFoundError:
        return None
    if len(raw) < GAUGE_BYTES:
        return None
    return dict(zip(GAUGE_SLOTS, struct.unpack(_FMT, raw), strict=True))


def present_area_ns(values: dict[str, int], now_ns: int) -> int:
    """The integral of the requests present up to ``now_ns`` (CLOCK_MONOTONIC), from a gauge
    reading: its value at the last change plus the requests present since then."""
    present = values["arrivals"] - values["departures"]
    return values["area_ns"] + present * max(0, now_ns - values["changed_ns"])


class GaugeReader:
    """Keeps a gauge file mapped for cheap repeated reads by the monitor."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._map: mmap.mmap | None = None

    def read(self) -> dict[str, int] | None:
        if self._map is None:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return None
            try:
                if os.fstat(fd).st_size < GAUGE_BYTES:
                    return None
                self._map = mmap.mmap(fd, GAUGE_BYTES, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
        # The writer is another process: a read during its copy mixes old and new slots, so
        # read until two copies agree (a handful of tries; one on a quiet tier).
        raw = self._map[:GAUGE_BYTES]
        for _ in range(READ_TRIES):
            again = self._map[:GAUGE_BYTES]
            if again == raw:
                break
            raw = again
        return dict(zip(GAUGE_SLOTS, struct.unpack(_FMT, raw), strict=True))

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


#: Printable ASCII that needs no encoding in a request-log field (no separator, quote, or the
#: escape character itself).
_SAFE = "".join(c for c in map(chr, range(0x20, 0x7F)) if c not in ',"%')
_PLAIN = re.compile(r"[ -~]*\Z")
_SPECIAL = frozenset(',"%')


def encode_field(value: object) -> str:
    """A request-log field: ``value`` as text, percent-encoded (UTF-8) where it is not plain
    printable ASCII or holds ``,``, ``"`` or ``%``; :func:`decode_field` inverts it. Lone
    surrogates, which UTF-8 cannot hold, are written as ``\\uXXXX`` text."""
    text = value if isinstance(value, str) else str(value)
    if _PLAIN.match(text) and _SPECIAL.isdisjoint(text):
        return text
    return quote(text, safe=_SAFE, errors="backslashreplace")


def decode_field(text: str) -> str:
    return unquote(text, errors="strict") if "%" in text else text


class RequestLog:
    """Buffered CSV request records, flushed every ``flush_s`` by a daemon thread."""

    HEADER = "request_id,interaction,start,end,status,detail\n"

    def __init__(self, path: str | os.PathLike[str], *, flush_s: float = 0.2) -> None:
        self._fh = open(path, "a", buffering=1 << 16, encoding="utf-8")  # noqa: SIM115
        if self._fh.tell() == 0:
            self._fh.write(self.HEADER)
        self._rows: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(flush_s,), daemon=True)
        self._thread.start()

    def record(
        self,
        request_id: object,
        interaction: object,
        start: float,
        end: float,
        status: str,
        detail: object = "",
    ) -> None:
        rid, what, extra = (encode_field(x) for x in (request_id, interaction, detail))
        line = f"{rid},{what},{start:.6f},{end:.6f},{encode_field(status)},{extra}\n"
        with self._lock:
            self._rows.append(line)

    def flush(self) -> None:
        with self._lock:
            rows, self._rows = self._rows, []
        if rows:
            self._fh.write("".join(rows))
            self._fh.flush()

    def _loop(self, every: float) -> None:
        while not self._stop.wait(every):
            self.flush()

    def close(self) -> None:
        if self._fh.closed:
            return
        self._stop.set()
        self.flush()
        self._fh.close()


def burn(cpu_s: float) -> None:
    """Consume ``cpu_s`` seconds of this thread's CPU time (a configured service demand)."""
    if cpu_s <= 0:
        return
    clock = time.thread_time
    end = clock() + cpu_s
    x = 0
    while clock() < end:
        for i in range(64):  # a few microseconds of real work between clock reads
            x ^= i * 2654435761
    return


def write_io(path: str | os.PathLike[str], n_bytes: int) -> None:
    """Append ``n_bytes`` to ``path`` and fsync them (a configured I/O demand)."""
    if n_bytes <= 0:
        return
    block = b"\0" * min(n_bytes, 1 << 16)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        left = n_bytes
        while left > 0:
            left -= os.write(fd, block[: min(left, len(block))])
        os.fsync(fd)
    finally:
        os.close(fd)
    # Keep the scratch file bounded: it only exists to make the disk work.
    if os.path.getsize(path) > 64 << 20:
        os.truncate(path, 0)
