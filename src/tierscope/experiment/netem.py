"""Network faults with packet-level fidelity on kernels without ``tc netem``: NFQUEUE.

Each emulated link (packets from one address to another, one direction) gets an iptables rule
in the ``mangle`` table's OUTPUT chain that sends its packets to a netfilter queue of its own;
the native emulator (``tierscope._native.Netem``, native/src/netem/) holds each packet for its
delay or drops it, with netem's distributions: constant, uniform, normal or Pareto delays with
jitter and correlation, Bernoulli or Gilbert–Elliott loss. Loopback traffic passes OUTPUT once,
so every packet is seen once. The rules carry ``--queue-bypass`` (packets pass untouched if no
emulator listens: a crashed emulator never cuts a link) and a comment naming the run, so that
:func:`remove_rules` finds what a killed run left. Root and Debian's ``iptables`` are needed.

Usage::

    with Emulator([LinkFault("127.0.0.21", "127.0.0.22", delay={"dist": "constant",
                   "mean": 0.02})], tag="run-1") as em:
        ...            # traffic from .21 to .22 is 20 ms late
    em.stats           # per link: packets, lost, mean delay
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shlex
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any

from tierscope.errors import InputError, TierscopeError

__all__ = ["Emulator", "LinkFault", "remove_rules", "require_emulator"]

#: Netfilter queue numbers tierscope uses (one per emulated link; emulators that run at once,
#: such as two network faults overlapping in a level, take different ones).
FIRST_QUEUE = 4200
QUEUES = 1024
MAX_LINKS = 64
_taken: set[int] = set()
_taken_lock = threading.Lock()


def _take_queues(n: int) -> list[int]:
    with _taken_lock:
        free = [q for q in range(FIRST_QUEUE, FIRST_QUEUE + QUEUES) if q not in _taken][:n]
        if len(free) < n:
            raise TierscopeError(f"more than {QUEUES} emulated links at once")
        _taken.update(free)
        return free


def _give_back(queues: list[int]) -> None:
    with _taken_lock:
        _taken.difference_update(queues)


COMMENT = "tierscope-netem"


@dataclass(frozen=True)
class LinkFault:
    """Packets from ``src`` to ``dst`` (IPv4 addresses; None: any) are delayed and lost as
    ``delay`` ({"dist": constant|uniform|normal|pareto, "mean", "jitter", "correlation"},
    seconds) and ``loss`` ({"model": "bernoulli", "p", "correlation"} or
    {"model": "gilbert_elliott", "p", "r", "bad_loss", "good_loss"}) say."""

    src: str | None
    dst: str | None
    delay: dict[str, Any] | None = None
    loss: dict[str, Any] | None = None
    protocol: str | None = None  # tcp | udp | icmp (None: all)
    sport: int | None = None  # source port (tcp or udp)
    dport: int | None = None  # destination port
    #: TCP segment size of connections opened while the link is emulated (their SYNs are
    #: clamped): 1460 makes a loopback link carry Ethernet-sized segments, where loopback's
    #: 64 KB ones would let TCP shrug off loss that an Ethernet path cannot.
    mss: int | None = None

    def __post_init__(self) -> None:
        for name in ("src", "dst"):
            value = getattr(self, name)
            if value is not None:
                try:
                    ipaddress.IPv4Address(value)
                except ValueError:
                    raise InputError(f"link.{name}", value, "an IPv4 address") from None
        if self.protocol not in (None, "tcp", "udp", "icmp"):
            raise InputError("link.protocol", self.protocol, "tcp, udp or icmp")
        if self.mss is not None and (self.protocol != "tcp" or not 88 <= self.mss <= 65495):
            raise InputError("link.mss", self.mss, "a TCP segment size 88-65495 (protocol tcp)")
        for name in ("sport", "dport"):
            port = getattr(self, name)
            if port is not None and (self.protocol not in ("tcp", "udp") or not 0 < port < 65536):
                raise InputError(f"link.{name}", port, "a port 1-65535 of protocol tcp or udp")

    def match(self) -> list[str]:
        out = []
        if self.src:
            out += ["-s", self.src]
        if self.dst:
            out += ["-d", self.dst]
        if self.protocol:
            out += ["-p", self.protocol]
        if self.sport is not None:
            out += ["--sport", str(self.sport)]
        if self.dport is not None:
            out += ["--dport", str(self.dport)]
        return out


def _iptables() -> str:
    path = shutil.which("iptables")
    if path is None:
        raise InputError("iptables", None, "Debian's iptables (apt-get install iptables)")
    if os.geteuid() != 0:
        raise InputError("network faults", "not root", "root (netfilter queues and iptables)")
    return path


def require_emulator(field: str) -> None:
    """InputError (naming ``field``) when network faults cannot be emulated here."""
    try:
        _iptables()
    except InputError as exc:
        raise InputError(field, exc.value, exc.expected) from None
    from tierscope import _native

    if not hasattr(_native, "Netem"):
        raise InputError(field, "network", "tierscope's native module built with the emulator "
                         "(make install)")  # fmt: skip


def _rules(link: LinkFault, queue: int, tag: str) -> list[list[str]]:
    """The link's iptables rules: its SYNs' segment size clamped (if asked), then its packets
    to the queue."""
    comment = ["-m", "comment", "--comment", f"{COMMENT} {tag}"]
    out = []
    if link.mss is not None:
        out.append([*link.match(), "--tcp-flags", "SYN,RST", "SYN", *comment,
                    "-j", "TCPMSS", "--set-mss", str(link.mss)])  # fmt: skip
    out.append([*link.match(), *comment, "-j", "NFQUEUE", "--queue-num", str(queue),
                "--queue-bypass"])  # fmt: skip
    return out


def remove_rules(tag: str | None = None) -> int:
    """Delete tierscope's emulator rules (of the run ``tag``, or all); how many were found."""
    path = shutil.which("iptables")
    if path is None:
        return 0
    listing = subprocess.run([path, "-w", "-t", "mangle", "-S", "OUTPUT"], capture_output=True,
                             text=True, check=False).stdout  # fmt: skip
    removed = 0
    for line in listing.splitlines():
        if COMMENT not in line or (tag is not None and f'"{COMMENT} {tag}"' not in line):
            continue
        args = shlex.split(line)
        if args[:2] == ["-A", "OUTPUT"]:
            subprocess.run([path, "-w", "-t", "mangle", "-D", "OUTPUT", *args[2:]],
                           capture_output=True, check=False)  # fmt: skip
            removed += 1
    return removed


@dataclass
class Emulator:
    """The emulated links of one run, from :meth:`start` to :meth:`stop` (a context manager)."""

    links: list[LinkFault]
    tag: str
    seed: int = 1
    stats: list[dict[str, Any]] = field(default_factory=list)
    _engine: Any = None
    _rules: list[list[str]] = field(default_factory=list)
    _queues: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 1 <= len(self.links) <= MAX_LINKS:
            raise InputError("links", len(self.links), f"1 to {MAX_LINKS} emulated links")

    def config(self, queues: list[int] | None = None) -> dict[str, Any]:
        """The native engine's configuration (``queues``: one per link; default from
        FIRST_QUEUE on)."""
        queues = queues or list(range(FIRST_QUEUE, FIRST_QUEUE + len(self.links)))
        links = []
        for i, (link, q) in enumerate(zip(self.links, queues, strict=True)):
            seed = self.seed * 1000 + i
            links.append({"queue": q, "delay": link.delay, "loss": link.loss, "seed": seed})
        return {"links": links}

    def start(self) -> Emulator:
        from tierscope import _native

        iptables = _iptables()
        self._queues = _take_queues(len(self.links))
        try:
            self._engine = _native.Netem(json.dumps(self.config(self._queues)))
        except BaseException as exc:
            _give_back(self._queues)
            self._queues = []
            if isinstance(exc, ValueError):
                raise InputError(
                    "faults (network)", str(exc), "valid delay/loss settings"
                ) from None
            raise
        try:
            for link, queue in zip(self.links, self._queues, strict=True):
                for rule in _rules(link, queue, self.tag):
                    proc = subprocess.run([iptables, "-w", "-t", "mangle", "-A", "OUTPUT", *rule],
                                          capture_output=True, text=True, check=False)  # fmt: skip
                    if proc.returncode != 0:
                        raise TierscopeError(f"iptables refused a rule: {proc.stderr.strip()}")
                    self._rules.append(rule)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> list[dict[str, Any]]:
        """Remove the rules first (new packets flow freely), then let the held ones through."""
        path = shutil.which("iptables")
        for rule in self._rules:
            if path is not None:
                subprocess.run([path, "-w", "-t", "mangle", "-D", "OUTPUT", *rule],
                               capture_output=True, check=False)  # fmt: skip
        self._rules.clear()
        if self._engine is not None:
            self._engine.stop()
            _give_back(self._queues)
            self._queues = []
            self.stats = [
                s | {"mean_delay": s["delay_sum"] / max(s["packets"] - s["lost"], 1)}
                for s in self._engine.stats()
            ]
            failure = self._engine.failure()
            self._engine = None
            if failure:
                raise TierscopeError(f"the network emulator stopped: {failure}")
        return self.stats

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        # (an error already on its way wins over one of stopping)
        quiet = contextlib.suppress(TierscopeError) if exc[0] is not None else None
        with quiet or contextlib.nullcontext():
            self.stop()
