"""Rich renderings of results for the terminal (``--json`` prints ``to_dict()`` instead).

Design decision: renderers read only the plain ``to_dict()`` documents, so the table a person sees
and the JSON a script reads can never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text


def signed_pct(v: float | None) -> str:
    """A relative error as a signed percentage; None as an em dash."""
    return "—" if v is None else f"{100 * v:+.1f} %"


def fmt(v: Any, digits: int = 5) -> str:
    """A number in ``digits`` significant digits; None (not finite) as an em dash."""
    if v is None:
        return "—"
    if isinstance(v, bool | str):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:.{digits}g}"


def solution(doc: dict[str, Any], title: str = "") -> RenderableType:
    """Tables of a solver result (PRODUCT.md §4.2 shape)."""
    head = Text(f"{title + ' — ' if title else ''}method: {doc['method']}", style="bold")
    classes = Table(title="classes", title_justify="left")
    for col in ("class", "population / λ", "throughput [1/s]", "response time [s]"):
        classes.add_column(col, justify="left" if col == "class" else "right")
    ci = doc.get("ci", {}).get("classes", {})
    for name, c in doc["classes"].items():
        size = fmt(c["population"]) if "population" in c else f"λ={fmt(c['arrival_rate'])}"
        hw = ci.get(name, {})
        classes.add_row(
            name,
            size,
            _with_ci(c["throughput"], hw.get("throughput")),
            _with_ci(c["response_time"], hw.get("response_time")),
        )
    stations = Table(title="stations", title_justify="left")
    cols = ("station", "class", "util.", "queue", "resp. [s]", "resid. [s]", "tput [1/s]")
    for col in cols:
        stations.add_column(col, justify="left" if col in ("station", "class") else "right")
    for name, s in doc["stations"].items():
        stations.add_row(name, "all", *_measure_cells(s), style="bold")
        if len(s["per_class"]) > 1:
            for cname, pc in s["per_class"].items():
                stations.add_row("", cname, *_measure_cells(pc))
    parts: list[RenderableType] = [head, classes, stations]
    parts += [Text(f"note: {n}", style="yellow") for n in doc.get("notes", [])]
    if "stats" in doc:
        st = doc["stats"]
        parts.append(
            Text(
                f"{fmt(st['events'])} events in {st['wall_s']:.2f} s "
                f"({fmt(st['events_per_s'], 3)} events/s), {st['replications']} replication(s), "
                f"seed {st['seed']}; ± = {st['confidence']:.0%} confidence half-width",
                style="dim",
            )
        )
    return Group(*parts)


def _with_ci(value: Any, half_width: Any) -> str:
    if half_width is None:
        return fmt(value)
    return f"{fmt(value)} ± {fmt(half_width, 2)}"


def _measure_cells(m: dict[str, Any]) -> list[str]:
    keys = ("utilization", "queue_length", "response_time", "residence_time", "throughput")
    return [fmt(m[k]) for k in keys]


def bounds(doc: dict[str, Any], title: str = "") -> RenderableType:
    """Tables of a bounds result: one row per bound kind, then the tightest."""
    parts: list[RenderableType] = [
        Text(f"{title + ' — ' if title else ''}method: bounds", style="bold")
    ]
    for name, c in doc["classes"].items():
        t = Table(title=f"class {name}, N = {fmt(c['population'])}", title_justify="left")
        for col in ("bounds", "X lower", "X upper", "R lower [s]", "R upper [s]"):
            t.add_column(col, justify="left" if col == "bounds" else "right")
        for kind, b in doc.get("bounds", {}).items():
            t.add_row(kind, *(fmt(v) for v in (*b["throughput"], *b["response_time"])))
        x, r = c["throughput"], c["response_time"]
        t.add_row(
            "tightest",
            fmt(x["lower"]),
            fmt(x["upper"]),
            fmt(r["lower"]),
            fmt(r["upper"]),
            style="bold",
        )
        parts.append(t)
    parts += [Text(f"note: {n}", style="yellow") for n in doc.get("notes", [])]
    return Group(*parts)


def key_values(title: str, rows: Iterable[tuple[str, Any]]) -> Table:
    """A two-column table of named values."""
    t = Table(title=title, title_justify="left", show_header=False)
    t.add_column("name")
    t.add_column("value", justify="right")
    for k, v in rows:
        t.add_row(k, fmt(v))
    return t


def run_summary(doc: dict[str, Any]) -> RenderableType:
    """What a sweep measured: one row per level, and the warnings about the load generator."""
    parts: list[RenderableType] = []
    table = Table(title="steady-state points", title_justify="left")
    cols = ("setup", "level", "X [1/s]", "mean R [s]", "p95 [s]", "errors")
    tiers = ("web", "app", "db")
    for col in (*cols, *(f"{t} CPU" for t in tiers), "client CPU"):
        table.add_column(col, justify="left" if col == "setup" else "right")
    for p in doc.get("points", []):
        table.add_row(
            p["setup"],
            fmt(p["level"]),
            fmt(p["throughput"], 4),
            fmt(p["rt_mean"], 3),
            fmt(p["rt_p95"], 3),
            fmt(int(p["errors"])),
            *(_percent(p.get(f"{t}.cpu_util")) for t in tiers),
            fmt(p.get("client.cpu_cores"), 2),
        )
    parts.append(table)
    for w in doc.get("warnings", []):
        parts.append(Text(f"warning: {w}", style="yellow"))
    parts.append(Text(f"run folder: {doc.get('run_dir')} ({doc.get('status')})", style="dim"))
    return Group(*parts)


def _percent(v: Any) -> str:
    return "—" if v is None else f"{100 * float(v):.0f}%"


def _lv(v: Any) -> str:
    return "—" if v is None else f"{v:g}"


def analysis_summary(doc: dict[str, Any], title: str = "") -> RenderableType:
    """Where the run saturates, what limits it, which metrics warn, which episodes hurt.

    Reads an analysis document (PRODUCT.md §4.5); the runner's ``run`` and ``demo`` print it
    after a sweep.
    """
    parts: list[RenderableType] = []
    if title:
        parts.append(Text(title, style="bold"))
    by_level = {(b["setup"], b["level"]): b for b in doc.get("bottlenecks", [])}
    for s in doc.get("saturation", []):
        t = Table(
            title=f"setup {s['setup']}: peak {fmt(s['peak_throughput'], 4)}/s at level "
            f"{_lv(s['peak_level'])}; saturated from {_lv(s['first_server_level'])}, knee "
            f"{_lv(s['knee_level'])}"
            + (f", SLO met up to {_lv(s['slo_level'])}" if s.get("slo_level") is not None else ""),
            title_justify="left",
        )
        for col in ("level", "throughput [1/s]", "rt mean [s]", "label", "bottleneck"):
            t.add_column(col, justify="right" if col != "bottleneck" else "left")
        for c in s["curve"]:
            b = by_level.get((s["setup"], c["level"]))
            t.add_row(
                _lv(c["level"]),
                fmt(c["throughput"], 4),
                fmt(c["rt_mean"], 3),
                c["label"],
                _bottleneck_cell(b),
            )
        parts.append(t)
        parts.append(
            Text(
                f"  Th_0.95 = {fmt(s['th95'], 4)}, Th_limit = {fmt(s['th_limit'], 4)} "
                f"(M = {s['margin']:.1%}, {s['margin_source']})",
                style="dim",
            )
        )
    if not doc.get("saturation"):
        for b in doc.get("bottlenecks", []):
            parts.append(Text(f"setup {b['setup']} level {_lv(b['level'])}: {_bottleneck_cell(b)}"))
    good = [i for i in doc.get("indicators", []) if i["category"] == "reliable"]
    if good:
        parts.append(
            Text("reliable indicators: " + ", ".join(i["metric"] for i in good[:8]), style="green")
        )
    bad = [i for i in doc.get("indicators", []) if i["category"] == "misleading"]
    if bad:
        parts.append(
            Text("misleading metrics: " + ", ".join(i["metric"] for i in bad[:8]), style="yellow")
        )
    episodes = doc.get("episodes", [])
    if episodes:
        t = Table(title=f"{len(episodes)} episodes", title_justify="left")
        for col in ("start [s]", "duration [s]", "tier", "resource", "kind", "root", "VLRT"):
            t.add_column(
                col, justify="left" if col in ("tier", "resource", "kind", "root") else "right"
            )
        for e in episodes[:12]:
            t.add_row(
                f"{e['start']:.2f}",
                f"{e['duration']:.2f}",
                e["tier"],
                e["resource"],
                e["kind"],
                e["root_tier"],
                str(e["vlrt_requests"]),
            )
        if len(episodes) > 12:
            t.caption = f"… and {len(episodes) - 12} more (tierscope analyze --json)"
        parts.append(t)
    else:
        parts.append(Text("no millibottleneck or saturation episodes", style="dim"))
    v = doc.get("vlrt") or {}
    if v.get("count"):
        parts.append(
            Text(
                f"{v['count']} requests took >= {v['threshold_s']:g} s; "
                f"{v['explained_fraction']:.0%} overlap an episode"
            )
        )
    parts += [Text(f"note: {n}", style="yellow") for n in doc.get("notes", [])]
    return Group(*parts)


def _bottleneck_cell(b: dict[str, Any] | None) -> str:
    if b is None:
        return "—"
    p = b.get("primary")
    if b["kind"] == "none" or p is None:
        return "none"
    where = (
        f"{p['tier']}/{p['resource']}"
        if p["node"] == p["tier"]
        else (f"{p['tier']}/{p['resource']} ({p['node']})")
    )
    return f"{where} {b['primary_fraction']:.0%}" + (
        "" if b["kind"] == "single" else f" [{b['kind']}]"
    )


def _ms(v: Any) -> str:
    return "—" if v is None else f"{v * 1e3:.3g}"


def load_summary(doc: dict[str, Any], title: str = "") -> RenderableType:
    """Tables of a load run summary (``tierscope load``)."""
    head = Text(
        f"{title + ' — ' if title else ''}{doc['mode']} load, "
        f"{fmt(doc['level'])} {doc['level_unit']}"
        + (f", mix {doc['mix']}" if doc.get("mix") else "")
        + f", steady window {fmt(doc['steady']['duration_s'], 3)} s",
        style="bold",
    )
    main = key_values(
        "steady window",
        [
            (r"throughput \[req/s]", fmt(doc["throughput"], 4)),
            ("requests", doc["requests"]),
            ("errors", doc["errors"]),
            *((f"  {k}", v) for k, v in doc["errors_by_class"].items()),
            (r"client CPU \[cores]", fmt(doc["client_cpu"], 3)),
            (r"timer lag p99 \[ms]", _ms(doc["lag"]["p99"])),
            ("late requests", doc["late"]),
            ("not sent", doc["not_sent"]),
        ],
    )
    per = Table(title=r"latency from intended start \[ms]", title_justify="left")
    widest = max([3, *(len(n) for n in doc["interactions"])])
    per.add_column("interaction", min_width=min(widest, 32), no_wrap=True)
    for col in ("requests", "errors", "req/s", "p50", "p95", "p99", "max"):
        per.add_column(col, justify="right")
    rows = [("all", doc["requests"], doc["errors"], doc["throughput"], doc["latency"])]
    if len(doc["interactions"]) > 1:
        rows += [
            (n, s["requests"], s["errors"], s["throughput"], s["latency"])
            for n, s in doc["interactions"].items()
        ]
    for name, n, e, x, q in rows:
        per.add_row(
            name, fmt(n), fmt(e), fmt(x, 4), _ms(q["p50"]), _ms(q["p95"]), _ms(q["p99"]),
            _ms(q["max"]),
        )  # fmt: skip
    parts: list[RenderableType] = [head, main, per]
    if doc["client_bottleneck"] or doc["client_near_bottleneck"]:
        word = (
            "WAS the bottleneck"
            if doc["client_bottleneck"]
            else "came close to being the bottleneck"
        )
        parts.append(Text(f"the load generator {word}:", style="bold red"))
        parts += [Text(f"  - {why}", style="red") for why in doc["client_bottleneck_why"]]
    if doc.get("partial"):
        parts.append(Text("partial: the run was stopped early", style="yellow"))
    return Group(*parts)


class LoadProgress:
    """A one-line live view of a running load (``LoadHandle.snapshot()``), only on a terminal."""

    def __init__(self, console: Console, total_s: float) -> None:
        self._total = total_s
        self._on = console.is_terminal
        self._live = Live(Text(""), console=console, transient=True, auto_refresh=False)
        self._started = False

    def show(self, handle: Any) -> None:
        if not self._on:
            return
        if not self._started:  # only once the load runs: bad input leaves the terminal alone
            self._live.start()
            self._started = True
        s = handle.snapshot()
        x = "—" if s.throughput is None else f"{s.throughput:,.0f}/s"
        cpu = "—" if s.client_cpu is None else f"{s.client_cpu:.2f}"
        line = (
            f"{s.phase:9} {max(s.elapsed, 0):5.1f}/{self._total:.0f} s {x:>9}  "
            f"p95 {_ms(s.p95)} ms  errors {s.errors:,}  client CPU {cpu}  "
            f"lag {_ms(s.lag_max)} ms"
        )
        self._live.update(Text(line), refresh=True)

    def close(self) -> None:
        if self._started:
            self._live.stop()
