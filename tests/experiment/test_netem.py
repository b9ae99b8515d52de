"""The NFQUEUE network emulator on real packets (issue 18's acceptance): the round trip of a
UDP echo grows by the requested delay at the median (within 1 ms), Bernoulli loss is within
one point of the requested rate over 10^4 packets, Gilbert–Elliott losses come in bursts of
mean 1/r, and stopping the emulator removes its rules and lets traffic through."""

from __future__ import annotations

import itertools
import os
import select
import shutil
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from tests.experiment._support import require
from tierscope.errors import InputError
from tierscope.experiment.netem import COMMENT, Emulator, LinkFault, remove_rules

pytestmark = [pytest.mark.real_system, pytest.mark.timing, pytest.mark.timeout(300)]

CLIENT, SERVER = "127.0.0.21", "127.0.0.22"


@pytest.fixture
def echo() -> Iterator[tuple[socket.socket, tuple[str, int], list[int]]]:
    """A UDP echo server on SERVER (it records every sequence number it gets) and a client
    socket on CLIENT."""
    if shutil.which("iptables") is None or os.geteuid() != 0:
        require("root and iptables", "run as root; apt-get install iptables")
    srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    srv.bind((SERVER, 0))
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    got: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                data, peer = srv.recvfrom(64)
            except TimeoutError:
                continue
            got.append(int.from_bytes(data[:4], "big"))
            srv.sendto(data, peer)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    cli = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    cli.bind((CLIENT, 0))
    cli.settimeout(2.0)
    try:
        yield cli, srv.getsockname(), got
    finally:
        stop.set()
        t.join(2)
        cli.close()
        srv.close()
        remove_rules("netem-test")


def rtts(cli: socket.socket, addr: tuple[str, int], n: int) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        cli.sendto(i.to_bytes(4, "big"), addr)
        cli.recvfrom(64)
        out.append(time.perf_counter() - t0)
    return out


def blast(cli: socket.socket, addr: tuple[str, int], n: int, got: list[int]) -> list[int]:
    """Send ``n`` numbered packets (0.2 ms apart); the numbers that arrived, in order."""
    got.clear()
    cli.setblocking(False)
    start = time.perf_counter()
    for i in range(n):
        while time.perf_counter() < start + i * 0.0002:
            pass
        while True:  # (packets held in a queue still count against the socket's buffer)
            try:
                cli.sendto(i.to_bytes(4, "big"), addr)
                break
            except BlockingIOError:
                select.select([], [cli], [], 0.5)
        with_replies = True
        while with_replies:
            try:
                cli.recvfrom(64)
            except BlockingIOError:
                with_replies = False
    cli.settimeout(2.0)
    time.sleep(0.5)
    return sorted(set(got))


def test_delay_adds_to_the_round_trip_at_the_median(echo) -> None:
    cli, addr, _ = echo
    base = statistics.median(rtts(cli, addr, 200))
    link = LinkFault(CLIENT, SERVER, delay={"dist": "constant", "mean": 0.020}, protocol="udp")
    with Emulator([link], tag="netem-test") as em:
        delayed = statistics.median(rtts(cli, addr, 200))
    assert abs((delayed - base) - 0.020) < 0.001, (base, delayed)
    assert em.stats[0]["packets"] >= 200 and em.stats[0]["lost"] == 0
    assert em.stats[0]["mean_delay"] == pytest.approx(0.020)
    # the rule is gone and the link is as before
    rules = subprocess.run(["iptables", "-w", "-t", "mangle", "-S", "OUTPUT"],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert COMMENT not in rules
    assert statistics.median(rtts(cli, addr, 50)) < base + 0.005


def test_bernoulli_loss_rate_over_ten_thousand_packets(echo) -> None:
    cli, addr, got = echo
    link = LinkFault(CLIENT, SERVER, loss={"model": "bernoulli", "p": 0.10}, protocol="udp")
    with Emulator([link], tag="netem-test", seed=3) as em:
        arrived = blast(cli, addr, 10_000, got)
    lost = 1 - len(arrived) / 10_000
    assert abs(lost - 0.10) < 0.01, lost
    assert em.stats[0]["lost"] == 10_000 - len(arrived)  # every loss was the emulator's


def test_gilbert_elliott_losses_come_in_bursts_of_one_over_r(echo) -> None:
    cli, addr, got = echo
    ge = {"model": "gilbert_elliott", "p": 0.05, "r": 0.25, "bad_loss": 1.0, "good_loss": 0.0}
    with Emulator([LinkFault(CLIENT, SERVER, loss=ge, protocol="udp")], tag="netem-test"):
        arrived = blast(cli, addr, 10_000, got)
    missing = sorted(set(range(10_000)) - set(arrived))
    bursts, run = [], 1
    for a, b in itertools.pairwise(missing):
        if b == a + 1:
            run += 1
        else:
            bursts.append(run)
            run = 1
    bursts.append(run)
    assert statistics.mean(bursts) == pytest.approx(1 / 0.25, rel=0.15), len(bursts)
    # stationary loss p / (p + r) = 1/6
    assert len(missing) / 10_000 == pytest.approx(0.05 / 0.30, abs=0.03)


def test_bad_settings_exit_before_anything_changes() -> None:
    with pytest.raises(InputError, match="IPv4"):
        LinkFault("broker-1", SERVER)
    if os.geteuid() == 0 and shutil.which("iptables"):
        wide = {"dist": "uniform", "mean": 0.01, "jitter": 0.05}  # below 0 at times
        with pytest.raises(InputError, match="delay"):
            Emulator([LinkFault(CLIENT, SERVER, delay=wide)], tag="t").start()
        assert remove_rules("t") == 0
