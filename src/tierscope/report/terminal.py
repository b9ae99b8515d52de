"""Rich renderings of results for the terminal (``--json`` prints ``to_dict()`` instead).

Design decision: renderers read only the plain ``to_dict()`` documents, so the table a person sees
and the JSON a script reads can never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType
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


@dataclass
class Col:
    """A column of a :class:`FittedTable`: its header, its cells as text, and ``drop``: 0 when it
    is always shown, else the larger the sooner it is left out on a narrow terminal."""

    header: str
    cells: list[str]
    justify: str = "right"
    drop: int = 0
    style: str | None = None


@dataclass
class FittedTable:
    """A table whose numbers are never cut: it is laid out at the width it is rendered at (80
    columns in a log file or a CI job, more on a wide terminal), each column as wide as its
    widest cell, and columns are left out, highest ``drop`` first, until it fits; the caption
    then says which, and where to find them (``more``)."""

    columns: list[Col]
    title: str | None = None
    caption: str | None = None
    more: str = "--json"
    row_styles: list[str | None] = field(default_factory=list)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Table]:
        yield self.layout(options.max_width)

    @staticmethod
    def _width(col: Col, wrap: bool) -> int:
        head = [cell_len(w) for w in col.header.split()] if wrap else [cell_len(col.header)]
        return max([*head, 1, *(cell_len(c) for c in col.cells)])

    def layout(self, width: int) -> Table:
        """The table at ``width`` columns of text."""
        shown = list(self.columns)

        def fits(wrap: bool) -> bool:
            # every column costs its width, a space each side and a rule; one rule ends the row
            return sum(self._width(c, wrap) + 3 for c in shown) + 1 <= width

        while not fits(wrap=True) and any(c.drop for c in shown):
            shown.remove(max(reversed(shown), key=lambda c: c.drop))
        wrap = not fits(wrap=False)  # headers on one line when they fit, else word by word
        left_out = [c.header for c in self.columns if c not in shown]
        caption = [self.caption] if self.caption else []
        if left_out:
            caption.append(f"not shown: {', '.join(left_out)} (wider terminal or {self.more})")
        table = Table(
            title=self.title,
            title_justify="left",
            caption=Text(" · ".join(caption)) if caption else None,
            caption_justify="left",
        )
        for c in shown:
            table.add_column(Text(c.header), justify=c.justify, width=self._width(c, wrap),  # type: ignore[arg-type]
                             overflow="fold", style=c.style)  # fmt: skip
        rows = max((len(c.cells) for c in shown), default=0)
        for i in range(rows):
            style = self.row_styles[i] if i < len(self.row_styles) else None
            table.add_row(*(Text(c.cells[i]) for c in shown), style=style)
        return table


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


def imported(doc: dict[str, Any]) -> Group:
    """What an import wrote (``workflows.import_*``): the run's facts, then how it was read."""
    facts = key_values(
        f"imported into {doc['run_dir']}",
        [("components", len(doc.get("components", [])))]
        + [(f"rows of {k}", v) for k, v in doc["rows"].items()]
        + [("time origin", doc.get("time_origin"))],
    )
    notes = [Text(f"- {n}", overflow="fold") for n in doc.get("notes", [])]
    return Group(facts, *notes)


def point_tiers(points: list[dict[str, Any]]) -> list[str]:
    """The tiers with a CPU figure in a run's points, in the order the run lists them."""
    seen: dict[str, None] = {}
    for p in points:
        for key in p:
            tier, _, metric = key.rpartition(".")
            if metric == "cpu_util" and tier not in ("client", "host"):
                seen.setdefault(tier)
    return list(seen)


def _ms_cell(v: Any) -> str:
    """Seconds shown as milliseconds, three significant digits (whole up to 999 s)."""
    if v is None or v != v:
        return "—"
    ms = float(v) * 1e3
    return f"{ms:.3g}" if ms < 1000 else f"{ms:,.0f}"


def run_summary(doc: dict[str, Any]) -> RenderableType:
    """What a sweep measured: one row per level, and the warnings about the load generator."""
    points = doc.get("points", [])
    tiers = point_tiers(points)
    cols: list[Col] = []
    if len({p["setup"] for p in points}) > 1:
        cols.append(Col("setup", [str(p["setup"]) for p in points], justify="left"))
    cols += [
        Col("level", [_lv(p["level"]) for p in points]),
        Col("X [1/s]", [fmt(p["throughput"], 4) for p in points]),
        Col("mean R [ms]", [_ms_cell(p["rt_mean"]) for p in points]),
        Col("p95 [ms]", [_ms_cell(p["rt_p95"]) for p in points]),
        Col("errors", [fmt(int(p["errors"])) for p in points], drop=2),
        *(Col(f"{t} CPU", [_percent(p.get(f"{t}.cpu_util")) for p in points], drop=3)
          for t in tiers),
        Col("client CPU [cores]", [fmt(p.get("client.cpu_cores"), 2) for p in points], drop=4),
    ]  # fmt: skip
    parts: list[RenderableType] = [
        FittedTable(cols, title="steady-state points", more="points.parquet")
    ]
    for w in doc.get("warnings", []):
        parts.append(Text(f"warning: {w}", style="yellow"))
    parts.append(Text(f"run folder: {doc.get('run_dir')} ({doc.get('status')})", style="dim"))
    return Group(*parts)


def _percent(v: Any) -> str:
    return "—" if v is None or v != v else f"{100 * float(v):.0f}%"


def _lv(v: Any) -> str:
    return "—" if v is None else f"{v:g}"


def _suspect_parts(doc: dict[str, Any], shown: int = 5) -> list[RenderableType]:
    """Incident data: the components ranked as the cause, best first."""
    found = doc.get("suspects") or []
    if not found:
        return []
    top = found[:shown]
    cols = [
        Col("#", [str(i + 1) for i in range(len(top))]),
        Col("component", [s["tier"] for s in top], justify="left"),
        Col("resource", [s["resource"] for s in top], justify="left"),
        Col("score", [f"{s['score']:.1f}" for s in top]),
        Col("onset [s]", [_lv(s["onset"]) for s in top], drop=1),
    ]
    first = top[0]
    return [
        FittedTable(cols, title="suspects (which component is the cause)", more="analyze --json"),
        Text(f"  {first['tier']}: {first['evidence']}", overflow="fold"),
    ]


def analysis_summary(doc: dict[str, Any], title: str = "") -> RenderableType:
    """Where the run saturates, what limits it, which metrics warn, which episodes hurt.

    Reads an analysis document (PRODUCT.md §4.5); the runner's ``run`` and ``demo`` print it
    after a sweep. Causes come before details: the saturation curve per setup, the indicators,
    the groups of episodes (trains, saturation intervals), then the first episodes themselves.
    """
    parts: list[RenderableType] = []
    if title:
        parts.append(Text(title, style="bold"))
    parts += _suspect_parts(doc)
    by_level = {(b["setup"], b["level"]): b for b in doc.get("bottlenecks", [])}
    for s in doc.get("saturation", []):
        curve = s["curve"]
        cells = [by_level.get((s["setup"], c["level"])) for c in curve]
        head = (
            f"setup {s['setup']}: peak {fmt(s['peak_throughput'], 4)}/s at level "
            f"{_lv(s['peak_level'])}; saturated from {_lv(s['first_server_level'])}, knee "
            f"{_lv(s['knee_level'])}"
            + (f", SLO met up to {_lv(s['slo_level'])}" if s.get("slo_level") is not None else "")
        )
        cols = [
            Col("level", [_lv(c["level"]) for c in curve]),
            Col("X [1/s]", [fmt(c["throughput"], 4) for c in curve]),
            Col("mean R [ms]", [_ms_cell(c["rt_mean"]) for c in curve], drop=2),
            Col("label", [str(c["label"]) for c in curve], justify="left", drop=1),
            Col("bottleneck", [_bottleneck_cell(b) for b in cells], justify="left"),
        ]
        parts.append(FittedTable(cols, title=head, more="analyze --json"))
        parts.append(
            Text(
                f"  Th_0.95 = {fmt(s['th95'], 4)}, Th_limit = {fmt(s['th_limit'], 4)} "
                f"(M = {s['margin']:.1%}, {s['margin_source']})",
                style="dim",
            )
        )
    if not doc.get("saturation") and not doc.get("suspects"):
        for b in doc.get("bottlenecks", []):
            parts.append(Text(f"setup {b['setup']} level {_lv(b['level'])}: {_bottleneck_cell(b)}"))
    parts += _indicator_lines(doc)
    parts += _episode_parts(doc)
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


def _indicator_lines(doc: dict[str, Any]) -> list[Text]:
    """Reliable, partially reliable and misleading metrics, those of the bottleneck tiers first
    and then by the strength of their evidence; what the data could not tell, once."""
    indicators = doc.get("indicators", [])
    limiting = [(b.get("primary") or {}).get("tier") for b in doc.get("bottlenecks", [])]
    first = {t: limiting.count(t) for t in limiting if t}

    def order(i: dict[str, Any]) -> tuple[int, float, str]:
        p = i.get("p_value")
        return (-first.get(i.get("tier"), 0), 1.0 if p is None else p, i["metric"])

    lines: list[Text] = []
    for category, style, shown in (("reliable", "green", 6), ("partially reliable", "cyan", 4),
                                   ("misleading", "yellow", 4)):  # fmt: skip
        chosen = sorted((i for i in indicators if i["category"] == category), key=order)
        if not chosen:
            continue
        named = []
        for i in chosen[:shown]:
            facts = [i["shape"]] if i.get("shape") else []
            if i.get("p_value") is not None:
                facts.append(f"p {i['p_value']:.2g}")
            named.append(i["metric"] + (f" ({', '.join(facts)})" if facts else ""))
        more = f", and {len(chosen) - shown} more" if len(chosen) > shown else ""
        lines.append(
            Text(f"{category} indicators ({len(chosen)}): {', '.join(named)}{more}", style=style)
        )
    insufficient = dict.fromkeys(i["insufficient"] for i in indicators if i.get("insufficient"))
    lines += [Text(f"indicators: {why}", style="dim") for why in list(insufficient)[:2]]
    return lines


def _episode_parts(doc: dict[str, Any]) -> list[RenderableType]:
    episodes = doc.get("episodes", [])
    if not episodes:
        return [Text("no millibottleneck or saturation episodes", style="dim")]
    parts: list[RenderableType] = []
    groups = doc.get("episode_groups", [])
    if groups:
        causes = Table(box=None, show_header=False, pad_edge=False, padding=(0, 1, 0, 0))
        causes.add_column(no_wrap=True)
        causes.add_column(ratio=1)
        for g in groups[:10]:
            causes.add_row("-", Text(g["summary"]))
        title = f"{len(episodes)} episodes from {len(groups)} causes"
        parts += [Text(title, style="bold"), causes]
        if len(groups) > 10:
            parts.append(Text(f"… and {len(groups) - 10} more causes (analyze --json)"))
    shown = episodes[:8]
    cols = [
        Col("start [s]", [f"{e['start']:.2f}" for e in shown]),
        Col("dur. [ms]", [f"{1e3 * e['duration']:.0f}" for e in shown]),
        Col("tier/resource", [f"{e['tier']}/{e['resource']}" for e in shown], justify="left"),
        Col("kind", [e["kind"] for e in shown], justify="left", drop=2),
        Col("root", [str(e["root_tier"]) for e in shown], justify="left"),
        Col("VLRT", [str(e["vlrt_requests"]) for e in shown], drop=1),
    ]
    rest = len(episodes) - len(shown)
    parts.append(
        FittedTable(
            cols,
            title=f"first {len(shown)} of {len(episodes)} episodes" if rest else "episodes",
            caption=f"… and {rest} more" if rest else None,
            more="analyze --json",
        )
    )
    return parts


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


def adapt(doc: dict[str, Any]) -> Table:
    """``kafka adapt``: one row per policy over the trace (the JSON has every window)."""
    t = Table(
        title=f"Producer control over a {doc['duration_s']:g} s trace at {doc['rate']:g} msg/s, "
        f"γ target {doc['target']:g}, deadline {doc['deadline_ms']:g} ms",
        title_justify="left",
    )
    heads = ("policy", "at target", "γ mean", "lost %", "dup %", "timely/s", "switches")
    for h in heads:
        t.add_column(h, justify="right" if h != "policy" else "left")

    def pct(x: float | None, scale: float = 100.0) -> str:
        return "-" if x is None else f"{scale * x:.3g}"

    for r in doc["runs"]:
        s = r["summary"]
        t.add_row(
            r["policy"], pct(s["time_at_target"]), pct(s["gamma_mean"], 1.0),
            pct(s["loss_rate"]), pct(s["duplicate_rate"]), f"{s['timely_throughput']:,.0f}",
            str(r["reconfigurations"]),
        )  # fmt: skip
    return t


def producer_speed(doc: dict[str, Any]) -> Table:
    """``kafka throughput``: one row per configuration, measured and predicted when left out."""
    held = doc.get("held_out") or {}
    title = "Producer throughput at full load"
    if held:
        title += (f"; model left out: median error {100 * held['median_error']:.1f} %, "
                  f"{held['within_10pct']} of {held['configurations']} within 10 %")  # fmt: skip
    t = Table(title=title, title_justify="left")
    heads = ("batch", "parts", "size B", "msg/s", "req/s", "req B", "predicted", "err %",
             "client")  # fmt: skip
    for h in heads:
        t.add_column(h, justify="right")
    for r in doc["rows"]:
        if "messages_per_s" not in r:
            t.add_row(str(r["batch_messages"]), str(r["partitions"]), str(r["message_size"]),
                      "-", "-", "-", "-", "-", r.get("failure", ""))  # fmt: skip
            continue
        pred = r.get("predicted_messages_per_s")
        t.add_row(
            str(r["batch_messages"]), str(r["partitions"]), str(r["message_size"]),
            f"{r['messages_per_s']:,.0f}", f"{r['requests_per_s']:,.0f}",
            f"{r['packet_bytes']:,.0f}", "-" if pred is None else f"{pred:,.0f}",
            "-" if pred is None else f"{100 * r['error']:+.1f}",
            "limit" if r.get("client_bottleneck") else "ok",
        )  # fmt: skip
    return t


def reliability(doc: dict[str, Any]) -> Table:
    """``kafka reliability``: one row per configuration (the JSON has every field)."""
    t = Table(
        title=f"Kafka reliability, {doc['messages']:,} messages per configuration at "
        f"{doc['rate']:g}/s",
        title_justify="left",
    )
    heads = ("acks", "batch", "timeout ms", "size B", "delay ms", "loss %", "sent", "lost",
             "dup")  # fmt: skip
    for h in heads:
        t.add_column(h, justify="right")
    for r in doc["rows"]:
        t.add_row(
            str(r["acks"]), str(r["batch_messages"]), str(r["timeout_ms"]),
            str(r["message_size"]), f"{r['delay_ms']:g}", f"{100 * r['loss']:g}",
            f"{r['sent']:,}", f"{r['lost']:,}", f"{r['duplicated']:,}",
        )  # fmt: skip
    return t
