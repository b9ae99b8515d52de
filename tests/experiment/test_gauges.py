"""Gauge files read by another process while a tier writes them: every read is a state the
writer published, never a half-written one."""

from __future__ import annotations

import multiprocessing as mp
from multiprocessing.synchronize import Event
from pathlib import Path

from tierscope.experiment.embedded._instrument import GaugeReader, Gauges

UPDATES = 200_000


def _write(path: str, ready: Event) -> None:
    gauges = Gauges(path)
    ready.set()
    for _ in range(UPDATES):
        gauges.add("arrivals")
        gauges.add("departures")


def test_a_reader_never_sees_a_half_written_gauge_file(tmp_path: Path) -> None:
    """A request arrives and departs, over and over: arrivals - departures is 0 or 1 in every
    state published. (Before, the writer zeroed the slots before filling them, and the monitor
    read a queue of 12 000 requests on a tier that held two; here about 1 read in 100 was torn.)"""
    path = str(tmp_path / "t.gauges")
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    writer = ctx.Process(target=_write, args=(path, ready))
    writer.start()
    try:
        assert ready.wait(30)
        reader = GaugeReader(path)
        reads, torn = 0, []
        while writer.is_alive() or reads == 0:
            v = reader.read()
            assert v is not None
            reads += 1
            if not 0 <= v["arrivals"] - v["departures"] <= 1:
                torn.append((v["arrivals"], v["departures"]))
        reader.close()
    finally:
        writer.join(30)
    assert writer.exitcode == 0
    assert reads > 10_000
    assert not torn, f"{len(torn)} of {reads} reads torn, e.g. {torn[:3]}"
