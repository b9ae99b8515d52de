"""What every embedded tier process shares: its JSON config, costs, readiness and shutdown.

A tier process runs ``tierscope.experiment.embedded.<tier> CONFIG.json`` as ``__main__``, started
isolated (:func:`tierscope.experiment.processes.python_argv`; by hand, ``python -m`` works).
The config names the files the runner reads (gauges, request log, ready file) and the tier's
knobs; when the process listens, it writes ``{"port": N, "pid": P}`` to the ready file (the
runner lets the kernel pick free ports, so a port in use never breaks a run).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class Costs:
    """Configured extra work per request at this tier: CPU seconds and I/O bytes by interaction."""

    cpu: dict[str, float]
    io: dict[str, int]

    def cpu_of(self, interaction: str) -> float:
        return float(self.cpu.get(interaction, self.cpu.get("default", 0.0)))

    def io_of(self, interaction: str) -> int:
        return int(self.io.get(interaction, self.io.get("default", 0)))


def load_config(argv: list[str] | None = None) -> dict[str, Any]:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.exit("usage: python -m tierscope.experiment.embedded.<tier> CONFIG.json")
    return json.loads(Path(args[0]).read_text())


def costs_of(cfg: dict[str, Any]) -> Costs:
    return Costs(cpu=dict(cfg.get("cpu_cost") or {}), io=dict(cfg.get("io_cost") or {}))


def announce(cfg: dict[str, Any], port: int) -> None:
    """Tell the runner this process is ready (atomic write of the ready file)."""
    path = Path(cfg["ready_file"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"port": port, "pid": os.getpid()}))
    os.replace(tmp, path)


async def serve_until_stopped(cfg: dict[str, Any], handle: Any) -> None:
    """Serve ``handle`` on the configured port, announce readiness, and return once SIGTERM or
    SIGINT arrives (the listening socket closed); the caller then closes its own resources."""
    import asyncio

    from tierscope.experiment.embedded._http import start_server

    server = await start_server(
        handle, cfg.get("host", "127.0.0.1"), int(cfg.get("port", 0)), reuse_port=True
    )
    announce(cfg, server.sockets[0].getsockname()[1])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    server.close()


def exit_on_parent_death() -> None:
    """Die with the runner even if it is SIGKILLed (Linux PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Server(Protocol):
    """An asyncio tier: what :func:`main` serves, runs beside it and closes."""

    async def handle(self, req: Any) -> Any: ...

    def background(self) -> list[Coroutine[Any, Any, None]]:
        """Tasks that run while it serves (cancelled when it stops)."""
        ...

    def close(self) -> None:
        """Release connections and flush logs, once it no longer serves."""
        ...


def main(make: Callable[[dict[str, Any]], Server]) -> None:
    """The ``main`` of an asyncio tier process: die with the runner, serve ``make(config)``
    until SIGTERM, close it and exit at once (threads blocked in I/O must not hold us)."""
    import asyncio

    exit_on_parent_death()
    cfg = load_config()

    async def serve() -> None:
        server = make(cfg)
        tasks = [asyncio.create_task(c) for c in server.background()]
        await serve_until_stopped(cfg, server.handle)
        for task in tasks:
            task.cancel()
        server.close()

    asyncio.run(serve())
    os._exit(0)
