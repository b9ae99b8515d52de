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
from rich.table import Table
from rich.text import Text

TIER_ORDER = ("web", "app", "db", "client", "host")


def _get(obj: Any, name: str, default: float = math.nan) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _fmt(x: Any, spec: str) -> str:
    try:
        v = float(x)
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
        self.live.update(self._render())

    def _render(self) -> Group:
        parts: list[Any] = [Text(self.title, style="bold")]
        if self.done:
            table = Table(box=None, pad_edge=False, header_style="dim")
            for col in (
                "setup",
                "level",
                "X [1/s]",
                "p95 [s]",
                "errors",
                "web",
                "app",
                "db",
                "client",
            ):
                table.add_column(col, justify="right")
            for o in self.done[-12:]:
                p = o.point
                table.add_row(
                    o.setup,
                    f"{o.level:g}",
                    _fmt(p.get("throughput"), ".1f"),
                    _fmt(p.get("rt_p95"), ".3f"),
                    _fmt(p.get("errors"), ".0f"),
                    *(
                        _fmt(p.get(f"{t}.cpu_util", math.nan) * 100, ".0f") + "%"
                        for t in ("web", "app", "db")
                    ),
                    _fmt(p.get("client.cpu_cores"), ".2f") + " c",
                )
            parts.append(table)
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
            for (tier, node), m in sorted(
                tiers.items(),
                key=lambda kv: TIER_ORDER.index(kv[0][0]) if kv[0][0] in TIER_ORDER else 9,
            ):
                if tier in ("web", "app", "db"):
                    util = _fmt(m.get("cpu_util", math.nan) * 100, ".0f")
                    cpu.append(f"{node} {util}% q{_fmt(m.get('queue_length'), '.0f')}")
            if cpu:
                parts.append(Text("  ".join(cpu), style="dim"))
        elif st.get("phase") == "deploying":
            parts.append(Text(f"setup {st['setup']}: starting the system…", style="cyan"))
        return Group(*parts)
