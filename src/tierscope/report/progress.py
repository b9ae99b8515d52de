"""Live progress of ``tierscope run`` / ``tierscope demo``: level, phase, throughput, p95, tier CPU.

Design decision: the runner only emits plain progress events (dicts); this module turns them
into a rich ``Live`` panel, so the runner stays free of rendering and ``--json`` runs can send the
panel to stderr while stdout carries only the JSON document.
"""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from tierscope.report.terminal import Col, FittedTable, point_tiers


def _get(obj: Any, name: str, default: float = math.nan) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _fmt(x: Any, spec: str, scale: float = 1.0) -> str:
    try:
        v = float(x) * scale
    except (TypeError, ValueError):
        return "–"
    return "–" if math.isnan(v) else format(v, spec)


class ProgressView:
    """Callable progress sink for :class:`tierscope.experiment.runner.Runner`."""

    def __init__(
        self, console: Console, *, title: str, levels: int, setups: int, reps: int
    ) -> None:
        self.console = console
        self.title = title
        self.levels, self.setups, self.reps = levels, setups, reps
        self.done: list[Any] = []
        self.state: dict[str, Any] = {}
        self.live = Live(console=console, refresh_per_second=4, transient=False)

    def __enter__(self) -> ProgressView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.update(self._render())
        self.live.__exit__(*exc)  # type: ignore[arg-type]

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "level_done":
            self.done.append(event["outcome"])
        elif kind == "deploy":
            self.state = {"setup": event["setup"], "phase": "deploying"}
        elif kind == "tick":
            self.state = event
        elif kind == "cleanup":
            self.live.console.print(Text(event["message"], style="yellow"))
        self.live.update(self._render())

    def _render(self) -> Group:
        parts: list[Any] = [Text(self.title, style="bold")]
        if self.done:
            points = [o.point for o in self.done[-12:]]
            tiers = point_tiers(points)
            cols = [
                Col("setup", [o.setup for o in self.done[-12:]], justify="left", drop=4),
                Col("level", [f"{o.level:g}" for o in self.done[-12:]]),
                Col("X [1/s]", [_fmt(p.get("throughput"), ".1f") for p in points]),
                Col("p95 [ms]", [_fmt(p.get("rt_p95"), ".3g", 1e3) for p in points]),
                Col("errors", [_fmt(p.get("errors"), ".0f") for p in points], drop=2),
                *(Col(f"{t} CPU", [_fmt(p.get(f"{t}.cpu_util"), ".0f", 100) + "%"
                                   for p in points], drop=3) for t in tiers),
                Col("client [cores]", [_fmt(p.get("client.cpu_cores"), ".2f") for p in points],
                    drop=5),
            ]  # fmt: skip
            parts.append(FittedTable(cols))
        st = self.state
        if st.get("event") == "tick":
            snap = st.get("snapshot")
            line = (
                f"setup {st['setup']} · level {st['level']:g} · rep {st['rep'] + 1}/{self.reps} · "
                f"{_get(snap, 'phase', '')} {_fmt(_get(snap, 'elapsed'), '.1f')} s · "
                f"X {_fmt(_get(snap, 'throughput'), '.1f')}/s · "
                f"p95 {_fmt(_get(snap, 'p95'), '.3f')} s · "
                f"errors {_fmt(_get(snap, 'errors'), '.0f')}"
            )
            parts.append(Text(line, style="cyan"))
            tiers = st.get("tiers", {})
            cpu = []
            for (tier, node), m in tiers.items():
                if tier not in ("client", "host"):
                    util = _fmt(m.get("cpu_util"), ".0f", 100)
                    cpu.append(f"{node} {util}% q{_fmt(m.get('queue_length'), '.0f')}")
            if cpu:
                parts.append(Text("  ".join(cpu), style="dim"))
        elif st.get("phase") == "deploying":
            parts.append(Text(f"setup {st['setup']}: starting the system…", style="cyan"))
        return Group(*parts)


class ProgressBars:
    """Progress bars of long computations (a :data:`tierscope.progress.Sink`): one bar per
    stage, with what is being done, how far, and an estimate of the time left; transient, so
    only the result stays on the terminal."""

    def __init__(self, console: Console) -> None:
        from rich.progress import (
            BarColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> ProgressBars:
        self._bars.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bars.__exit__(*exc)  # type: ignore[arg-type]

    def __call__(self, stage: str, done: float, total: float) -> None:
        task = self._tasks.get(stage)
        if task is None:
            task = self._tasks[stage] = self._bars.add_task(stage, total=total or None)
        self._bars.update(task, completed=done, total=total or None)
