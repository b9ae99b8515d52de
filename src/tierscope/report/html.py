"""The HTML report: one self-contained file (plotly.js inlined), readable offline.

Design decision: the page is built from the analysis document and the plot series only
(``analysis.series.report_series``), so what it shows is what ``analysis.json`` says; every
number of the document is explained in words next to its chart, and a glossary at the end
defines every field.
"""

from __future__ import annotations

import html
import itertools
import json
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from tierscope.report.terminal import signed_pct

__all__ = ["render"]

ZONE_COLOURS = {
    "client": "rgba(46,160,67,0.22)",
    "gray": "rgba(128,128,128,0.3)",
    "server": "rgba(215,58,73,0.2)",
}
KIND_CODES = {"none": 0, "single": 1, "concurrent": 2, "oscillatory": 3, "client": 4}
CATEGORY_CODES = {
    "reliable": 0,
    "partially reliable": 1,
    "not reliable": 2,
    "misleading": 3,
    "unidentified": 4,
}
PALETTE = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]

GLOSSARY = [
    (
        "saturation[].peak_throughput, peak_level",
        "the largest mean throughput over the repetitions of a level, and that level",
    ),
    (
        "th95",
        "Th_0.95 = 0.95 × peak: from the first level whose mean throughput reaches it on, "
        "the server is the bottleneck (label server)",
    ),
    (
        "th_limit",
        "Th_limit = Th_0.95 × (1 − M); levels below it (before the first server "
        "level) are client-bound, levels in [Th_limit, Th_0.95) are gray",
    ),
    (
        "margin, margin_source, margin_range",
        'M, and where it comes from: a "+1 node" companion '
        "setup (the first level where one more node gains 2 % must lie in the gray zone, the level "
        "before it outside) or the default",
    ),
    ("first_server_level", "the saturation point: the first level labelled server"),
    (
        "knee_level",
        "the knee of the throughput curve by Kneedle (where returns start to "
        "diminish); not the same as the saturation point",
    ),
    (
        "intervention",
        "Malkowski's intervention analysis: the level from which the throughput's "
        "slope per unit of load changes regime, with the p-value of that change",
    ),
    (
        "slo_level, slo_intervention_level",
        "the last level meeting the SLO, and Malkowski's "
        "intervention point on SLO satisfaction (only with --slo)",
    ),
    (
        "usl",
        "Universal Scalability Law fit X(N) = λN / (1 + σ(N−1) + κN(N−1)): contention σ, "
        "coherency κ, single-user throughput λ and the modelled peak",
    ),
    (
        "labels, curve",
        "per level (and repetition) the client / gray / server label, with the "
        "mean, spread and response times of the level",
    ),
    (
        "bottlenecks[].kind",
        "none | single | concurrent (several resources saturated "
        "independently or together) | oscillatory (resources that take turns) | client (the load "
        "generator limited throughput)",
    ),
    (
        "resources[]",
        "the level's saturated resources by role: bottlenecks (the primary first), the load "
        "generator's (client), push-back (soft resources full because of a bottleneck), the "
        "host's",
    ),
    (
        "resources[].saturation_fraction",
        "the fraction of windows of window_s seconds in which "
        "the resource's mean utilisation reached the saturation threshold",
    ),
    (
        "pairs[]",
        "two saturated resources: their overlap against the overlap of independent "
        "resources (lift, φ) and permutation p-values for 'alternating' and 'together'",
    ),
    (
        "primary, primary_fraction",
        "the bottleneck saturated most often and its fraction of "
        "windows (for an oscillating group: windows with any of its resources saturated)",
    ),
    (
        "indicators[].category",
        "reliable (one value tells client- from server-bound), partially "
        "reliable (the trend tells), not reliable, misleading (changes at the wrong load), "
        "unidentified (server-bound at every level, or too few levels to tell)",
    ),
    (
        "indicators[].shape, p_value, effect, threshold",
        "the piecewise-linear shape fitted over the levels (e.g. linear-constant: rises, then "
        "flat from saturation), the permutation p-value of that change against a straight line, "
        "how far it moves the curve (fraction of the metric's range), and the value that "
        "separates client- from server-bound levels (reliable only)",
    ),
    (
        "indicators[].insufficient, indicator_sets[].insufficient",
        "what the data cannot tell instead of a default verdict: e.g. with one setup, whether "
        "a metric misleads across setups and which combinations cover them",
    ),
    (
        "episode_groups",
        "the causes behind the episodes: periodic trains (period ± spread of the gaps, p-value "
        "against random onsets), saturation intervals (levels where the root's resource is the "
        "bottleneck) and one-offs, with counts, typical duration, root tier and the VLRT "
        "requests they explain; episodes lists their indices in the episode table",
    ),
    (
        "indicator_sets",
        "smallest sets of metrics with a reliable metric in every identifiable "
        "setup: any metric, server-side only, never misleading",
    ),
    (
        "episodes[]",
        "a tier's queue beyond its saturation load long enough to delay requests: "
        "start/end [s on the run's time base], millibottleneck (< 1 s) or saturation, peak queue, "
        "backlog_s (excess queue / capacity), delay_s (response time added), root_tier (where the "
        "incident began: the tier whose queue rose first, the deepest on a tie), resource (the "
        "tier's saturated resource in the interval, or queue)",
    ),
    (
        "tier_loads[]",
        "per tier the saturation load q* (requests in the tier beyond which "
        "throughput grows no more) and the capacity from the (queue, throughput) scatter",
    ),
    (
        "vlrt",
        "very long response time requests (>= threshold_s), and the fraction whose "
        "lifetime overlaps an episode",
    ),
]


def _div(fig: go.Figure, height: int = 420) -> str:
    fig.update_layout(
        height=height, margin={"l": 60, "r": 30, "t": 50, "b": 50}, template="plotly_white"
    )
    return fig.to_html(full_html=False, include_plotlyjs=False, config={"responsive": True})


def _e(text: Any) -> str:
    return html.escape(str(text))


def _p(text: Any) -> str:
    """A name from the run (setup, tier, node, metric) as plotly text: plotly renders a subset
    of HTML in titles, legends, axes and cell text (a setup named ``<a href=…>`` would be a
    live link), and shows character entities as the characters."""
    return html.escape(str(text), quote=False)


def _n(v: Any, digits: int = 4) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def _period(group: dict[str, Any]) -> str:
    if group["period_s"] is None:
        return "—"
    spread = group["period_spread_s"]
    return _n(group["period_s"], 3) + ("" if spread is None else f" ± {_n(spread, 2)}")


def _suspects_section(doc: dict[str, Any]) -> str:
    """Incident data: every component ranked as the cause, best first (the first section)."""
    found = doc.get("suspects") or []
    if not found:
        return ""
    rows = "".join(
        f"<tr><td>{i + 1}</td><td>{_e(s['tier'])}</td><td>{_e(s['resource'])}</td>"
        f"<td>{_n(s['score'], 3)}</td><td>{_n(s['onset'], 4)}</td><td>{_e(s['evidence'])}</td></tr>"
        for i, s in enumerate(found)
    )
    return (
        "<h2>Suspects: which component is the cause</h2>"
        "<p>Each component's resources against their normal behaviour: the score is how far "
        "the departure goes, in normal spreads (90th percentile over the incident); the onset "
        "is when it began, in seconds from the start of the data.</p>"
        "<table><tr><th>#</th><th>component</th><th>resource</th><th>score</th>"
        f"<th>onset [s]</th><th>evidence</th></tr>{rows}</table>"
    )


def _saturation_section(doc: dict[str, Any]) -> str:
    parts = ["<h2>Throughput and response time against load</h2>"]
    if not doc["saturation"]:
        return parts[0] + "<p>No load levels (points) in this run: no saturation analysis.</p>"
    for s in doc["saturation"]:
        curve = s["curve"]
        lv = [c["level"] for c in curve]
        fig = make_subplots(specs=[[{"secondary_y": True}]])
        fig.add_trace(
            go.Scatter(
                x=lv,
                y=[c["throughput"] for c in curve],
                name="throughput",
                mode="lines+markers",
                error_y={"type": "data", "array": [c["throughput_std"] or 0 for c in curve]},
            ),
            secondary_y=False,
        )
        if any(c["rt_mean"] is not None for c in curve):
            fig.add_trace(
                go.Scatter(
                    x=lv,
                    y=[c["rt_mean"] for c in curve],
                    name="rt mean [s]",
                    mode="lines+markers",
                    line={"dash": "dot"},
                ),
                secondary_y=True,
            )
        if any(c["rt_p95"] is not None for c in curve):
            fig.add_trace(
                go.Scatter(
                    x=lv,
                    y=[c["rt_p95"] for c in curve],
                    name="rt p95 [s]",
                    mode="lines",
                    line={"dash": "dash"},
                ),
                secondary_y=True,
            )
        steps = [b - a for a, b in itertools.pairwise(lv)] or [1.0]
        for c in curve:  # after the traces: plotly skips shapes on empty subplots
            half = 0.5 * min(steps)
            fig.add_vrect(
                x0=c["level"] - half,
                x1=c["level"] + half,
                fillcolor=ZONE_COLOURS[c["label"]],
                line_width=0,
                layer="below",
            )
        fig.add_hline(
            y=s["th95"], line_dash="dash", line_color="#d73a49", annotation_text="Th_0.95"
        )
        fig.add_hline(
            y=s["th_limit"], line_dash="dot", line_color="#6a737d", annotation_text="Th_limit"
        )
        marks = [
            ("peak", s["peak_level"], "#d73a49"),
            ("knee", s["knee_level"], "#0366d6"),
            ("saturated", s["first_server_level"], "#b31d28"),
            ("SLO", s["slo_level"], "#6f42c1"),
            ("intervention", (s["intervention"] or {}).get("level"), "#e36209"),
        ]
        at: dict[float, list[tuple[str, str]]] = {}
        for name, x, colour in marks:
            if x is not None:
                at.setdefault(float(x), []).append((name, colour))
        for x, named in at.items():  # one line and one label per level, names joined
            fig.add_vline(
                x=x,
                line_color=named[0][1],
                line_width=1,
                annotation_text=", ".join(n for n, _ in named),
                annotation_position="top",
            )
        fig.update_layout(title=f"setup {_p(s['setup'])}: client (green), gray, server (red) zones")
        fig.update_xaxes(title_text="load level")
        fig.update_yaxes(title_text="throughput [1/s]", secondary_y=False)
        fig.update_yaxes(title_text="response time [s]", secondary_y=True)
        parts.append(_div(fig))
        usl = s["usl"]
        usl_text = (
            "no USL fit (fewer than three usable levels)."
            if usl is None
            else (
                f"The USL fit gives contention σ = {_n(usl['sigma'])}, coherency κ = "
                f"{_n(usl['kappa'])} and λ = {_n(usl['lambda'])}/s per unit of concurrency "
                f"(R² = {_n(usl['r2'])}), a modelled peak of {_n(usl['x_peak'])}/s at N = "
                f"{_n(usl['n_peak'])}."
            )
        )
        iv = s["intervention"] or {}
        parts.append(
            "<p>"
            f"Setup <b>{_e(s['setup'])}</b> peaks at <b>{_n(s['peak_throughput'])}/s</b> at level "
            f"{_n(s['peak_level'])}. Th_0.95 = 0.95 × peak = {_n(s['th95'])}; with the margin "
            f"M = {s['margin']:.1%} ({_e(s['margin_source'])}) Th_limit = {_n(s['th_limit'])}. "
            f"The server is the bottleneck from level <b>{_n(s['first_server_level'])}</b> on "
            f"(the saturation point). The knee (Kneedle) is at {_n(s['knee_level'])}; "
            f"the intervention analysis puts the change of regime at {_n(iv.get('level'))} "
            f"(p = {_n(iv.get('p_value'), 2)}). "
            + (
                f"The SLO holds up to level {_n(s['slo_level'])}. "
                if s["slo_level"] is not None
                else ""
            )
            + usl_text
            + "".join(f" <i>Note: {_e(n)}.</i>" for n in s["notes"])
            + "</p>"
        )
    return "\n".join(parts)


def _bottleneck_section(doc: dict[str, Any], series: dict[str, Any]) -> str:
    parts = ["<h2>Bottleneck map</h2>"]
    bns = [b for b in doc["bottlenecks"] if b["level"] is not None]
    if bns:
        setups = sorted({b["setup"] for b in bns})
        levels = sorted({b["level"] for b in bns})
        z = [[None] * len(levels) for _ in setups]
        text = [[""] * len(levels) for _ in setups]
        for b in bns:
            i, j = setups.index(b["setup"]), levels.index(b["level"])
            z[i][j] = KIND_CODES[b["kind"]]
            p = b["primary"]
            text[i][j] = (
                "none"
                if p is None
                else (
                    f"{_p(p['tier'])}/{_p(p['resource'])}<br>"
                    f"{b['kind']} {b['primary_fraction']:.0%}"
                )
            )
        scale = [
            [0.0, "#f6f8fa"],
            [0.2, "#f6f8fa"],
            [0.2, "#f9c513"],
            [0.4, "#f9c513"],
            [0.4, "#e36209"],
            [0.6, "#e36209"],
            [0.6, "#6f42c1"],
            [0.8, "#6f42c1"],
            [0.8, "#0366d6"],
            [1.0, "#0366d6"],
        ]
        fig = go.Figure(
            go.Heatmap(
                z=z,
                x=[str(v) for v in levels],
                y=[_p(s) for s in setups],
                text=text,
                texttemplate="%{text}",
                colorscale=scale,
                zmin=-0.5,
                zmax=4.5,
                showscale=True,
                colorbar={"tickvals": list(KIND_CODES.values()), "ticktext": list(KIND_CODES)},
            )
        )
        fig.update_layout(title="primary bottleneck per setup and load level")
        fig.update_xaxes(title_text="load level", type="category")
        parts.append(_div(fig, 180 + 60 * len(setups)))
    rows = []
    for b in doc["bottlenecks"]:
        rows.append(
            f"<tr><td>{_e(b['setup'])}</td><td>{_n(b['level'])}</td><td>{_e(b['label'] or '—')}"
            f"</td><td>{_e(b['kind'])}</td><td>{_e(b['evidence'])}</td></tr>"
        )
    if rows:
        parts.append(
            "<table><tr><th>setup</th><th>level</th><th>label</th><th>kind</th>"
            "<th>evidence</th></tr>" + "".join(rows) + "</table>"
        )
    else:
        parts.append("<p>No steady windows to judge.</p>")
    if series.get("utilization"):
        parts.append("<h2>Per-tier utilisation against load</h2>")
        fig = go.Figure()
        for u in series["utilization"]:
            fig.add_trace(
                go.Scatter(
                    x=u["levels"],
                    y=u["values"],
                    mode="lines+markers",
                    name=f"{_p(u['setup'])} {_p(u['metric'])}",
                )
            )
        fig.add_hline(
            y=doc["options"]["saturation_threshold"],
            line_dash="dash",
            annotation_text="saturation threshold",
        )
        fig.update_xaxes(title_text="load level")
        fig.update_yaxes(title_text="mean over the steady window (fraction)")
        parts.append(_div(fig))
    return "\n".join(parts)


#: How a component is drawn in the call graph by the worst role it had at any level.
ROLE_STYLE = {
    "bottleneck": ("#d73a49", "bottleneck"),
    "push-back": ("#e36209", "push-back"),
    "saturated": ("#f9c513", "saturated"),
    "ok": ("#28a745", "never saturated"),
}


def component_states(doc: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """component -> (state, where): its worst role over the judged levels (the primary
    bottleneck first, then push-back, then any other saturated resource) and the setups and
    levels where it had it."""
    rank = {"bottleneck": 3, "push-back": 2, "saturated": 1}
    seen: dict[str, tuple[int, list[str]]] = {}
    for b in doc["bottlenecks"]:
        if b["level"] is None:
            continue
        at = f"{b['setup']} level {b['level']:g}"
        roles: dict[str, int] = {}
        primary = b["primary"]
        for r in b.get("resources") or []:
            role = r.get("role")
            state = "push-back" if role == "push-back" else "saturated"
            if primary is not None and r["tier"] == primary["tier"] and role == "bottleneck":
                state = "bottleneck"
            roles[r["tier"]] = max(roles.get(r["tier"], 0), rank[state])
        if primary is not None:
            roles[primary["tier"]] = rank["bottleneck"]
        for tier, k in roles.items():
            best, where = seen.get(tier, (0, []))
            if k > best:
                seen[tier] = (k, [at])
            elif k == best:
                where.append(at)
    names = {v: k for k, v in rank.items()}
    return {t: (names[k], ", ".join(w[:3]) + (" …" if len(w) > 3 else "")) for t, (k, w) in
            seen.items()}  # fmt: skip


def _graph_section(doc: dict[str, Any], graph: dict[str, Any] | None) -> str:
    """The components as the call graph places them (front to back from left to right, each
    depth a column), each coloured by its worst state over the levels, the primary bottleneck
    marked; calls as arrows labelled with their probability and count where not 1."""
    if not graph or not graph.get("components"):
        return ""
    comps: dict[str, Any] = graph["components"]
    order = [n for n in graph.get("order") or comps if n in comps]
    depth = {n: 0 for n in order}
    for n in order:  # front to back: a caller comes before its callees
        for call in comps[n]["calls"]:
            if call["to"] in depth:
                depth[call["to"]] = max(depth[call["to"]], depth[n] + 1)
    columns: dict[int, list[str]] = {}
    for n in order:
        columns.setdefault(depth[n], []).append(n)
    pos = {n: (float(d), -float(i) + (len(col) - 1) / 2) for d, col in columns.items()
           for i, n in enumerate(col)}  # fmt: skip
    states = component_states(doc)
    fig = go.Figure()
    for n in order:
        for call in comps[n]["calls"]:
            if call["to"] not in pos:
                continue
            (x0, y0), (x1, y1) = pos[n], pos[call["to"]]
            label = "" if call["p"] == 1 else f"p {call['p']:g}"
            if call["times"] != 1:
                label += f" {call['times']} visits"
            fig.add_annotation(x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x",
                               ayref="y", showarrow=True, arrowhead=2, arrowsize=1.2,
                               standoff=18, startstandoff=18, arrowcolor="#6a737d")  # fmt: skip
            if label.strip():
                fig.add_annotation(x=(x0 + x1) / 2, y=(y0 + y1) / 2, text=_e(label.strip()),
                                   showarrow=False, yshift=10, font={"size": 11})  # fmt: skip
        if comps[n].get("parallel") and len(comps[n]["calls"]) > 1:
            x, y = pos[n]
            fig.add_annotation(x=x, y=y, text="fan-out", showarrow=False, yshift=-26,
                               font={"size": 10, "color": "#6a737d"})  # fmt: skip
    for state, (colour, legend) in ROLE_STYLE.items():
        members = [n for n in order if states.get(n, ("ok", ""))[0] == state]
        if not members:
            continue
        fig.add_trace(
            go.Scatter(
                x=[pos[n][0] for n in members],
                y=[pos[n][1] for n in members],
                mode="markers+text",
                marker={"size": 34, "color": colour, "symbol": "star" if state == "bottleneck"
                        else "circle", "line": {"width": 1, "color": "#24292e"}},
                text=[_p(n) for n in members],
                textposition="top center",
                hovertext=[f"{_p(n)}: {legend}" + (f" at {_p(states[n][1])}" if n in states
                           else "") for n in members],
                hoverinfo="text",
                name=legend,
            )
        )  # fmt: skip
    fig.update_xaxes(visible=False, range=[-0.5, max(depth.values()) + 0.5])
    tallest = max(len(c) for c in columns.values())
    fig.update_yaxes(visible=False, range=[-tallest / 2 - 0.5, tallest / 2 + 0.5])
    fig.update_layout(title="components and calls, each by its worst state over the levels")
    rows = "".join(
        f"<tr><td>{_e(n)}</td><td>{_e(ROLE_STYLE[states.get(n, ('ok', ''))[0]][1])}</td>"
        f"<td>{_e(states[n][1] if n in states else '—')}</td></tr>"
        for n in order
    )
    note = " (inferred from the order requests reach them)" if graph.get("inferred") else ""
    return "\n".join(
        [
            f"<h2>Call graph{_e(note)}</h2>",
            _div(fig, 160 + 90 * tallest),
            "<table><tr><th>component</th><th>state</th><th>where</th></tr>" + rows + "</table>",
        ]
    )


def _indicator_section(doc: dict[str, Any]) -> str:
    parts = ["<h2>Indicators of saturation</h2>"]
    ind = doc["indicators"]
    if not ind:
        return parts[0] + "<p>No metrics over a sweep of levels: no indicator analysis.</p>"
    setups = sorted({s for i in ind for s in i["per_setup"]})
    names = [i["metric"] for i in ind]
    z = [[CATEGORY_CODES.get(i["per_setup"].get(s, "")) for s in setups] for i in ind]
    text = [[i["per_setup"].get(s, "") for s in setups] for i in ind]
    scale = [
        [0.0, "#2ea043"],
        [0.2, "#2ea043"],
        [0.2, "#a2d9a8"],
        [0.4, "#a2d9a8"],
        [0.4, "#e1e4e8"],
        [0.6, "#e1e4e8"],
        [0.6, "#d73a49"],
        [0.8, "#d73a49"],
        [0.8, "#ffffff"],
        [1.0, "#ffffff"],
    ]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[_p(s) for s in setups],
            y=[_p(n) for n in names],
            text=text,
            texttemplate="%{text}",
            colorscale=scale,
            zmin=-0.5,
            zmax=4.5,
            colorbar={"tickvals": list(CATEGORY_CODES.values()), "ticktext": list(CATEGORY_CODES)},
        )
    )
    fig.update_layout(title="indicator matrix: category of each metric in each setup")
    fig.update_yaxes(autorange="reversed")
    parts.append(_div(fig, 160 + 22 * len(names)))
    rows = "".join(
        f"<tr><td>{_e(i['metric'])}</td><td>{_e(i['category'])}</td>"
        f"<td>{_e(i.get('shape') or '—')}</td><td>{_n(i.get('p_value'), 2)}</td>"
        f"<td>{_n(i.get('effect'), 2)}</td><td>{_n(i.get('threshold'))}</td>"
        f"<td>{_e(i['evidence'])}</td></tr>"
        for i in ind
    )
    parts.append(
        "<table><tr><th>metric</th><th>overall</th><th>shape</th><th>p</th>"
        "<th>effect (of range)</th><th>threshold</th><th>evidence</th></tr>"
        f"{rows}</table>"
    )
    insufficient = dict.fromkeys(i["insufficient"] for i in ind if i.get("insufficient"))
    parts += [f'<p class="note">What this run cannot tell: {_e(w)}.</p>' for w in insufficient]
    sets = "".join(
        f"<li>{_e(s['variant'])}: "
        + (
            _e(s["insufficient"])
            if s.get("insufficient")
            else f"{_e(', '.join(s['metrics']) or 'none')} — covers {len(s['covered'])} setup(s)"
            + (f", not {_e(', '.join(s['uncovered']))}" if s["uncovered"] else "")
        )
        + "</li>"
        for s in doc["indicator_sets"]
    )
    parts.append(f"<p>Smallest covering sets of reliable metrics:</p><ul>{sets}</ul>")
    return "\n".join(parts)


def _timeline_section(doc: dict[str, Any], series: dict[str, Any]) -> str:
    parts = ["<h2>Millibottleneck timeline</h2>"]
    tl = series.get("timeline")
    episodes = doc["episodes"]
    tiers = [t for t in doc["tiers"] if t != "client"]
    colour = {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(doc["tiers"])}
    if tl is not None:
        fig = make_subplots(
            rows=2,
            cols=1,
            shared_xaxes=True,
            vertical_spacing=0.06,
            subplot_titles=(
                "requests in each tier (time average per window)",
                "point-in-time response time, end to end",
            ),
        )
        for tier in [t for t in tiers if t in tl["tiers"]]:
            fig.add_trace(
                go.Scatter(
                    x=tl["t"],
                    y=tl["tiers"][tier]["q_mean"],
                    name=_p(tier),
                    mode="lines",
                    line={"color": colour[tier]},
                ),
                row=1,
                col=1,
            )
        front = "client" if "client" in tl["tiers"] else next(iter(tl["tiers"]))
        fig.add_trace(
            go.Scatter(
                x=tl["t"],
                y=tl["tiers"][front]["rt_mean"],
                name="rt mean",
                mode="lines",
                line={"color": "#24292e"},
            ),
            row=2,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=tl["t"],
                y=tl["tiers"][front]["rt_p99"],
                name="rt p99",
                mode="lines",
                line={"color": "#959da5"},
            ),
            row=2,
            col=1,
        )
        if series.get("vlrt"):
            fig.add_trace(
                go.Scatter(
                    x=[v["end"] for v in series["vlrt"]],
                    y=[v["end"] - v["start"] for v in series["vlrt"]],
                    name="VLRT requests",
                    mode="markers",
                    marker={"color": "#d73a49", "symbol": "x", "size": 7},
                ),
                row=2,
                col=1,
            )
        fig.update_yaxes(title_text="requests", row=1, col=1)
        fig.update_yaxes(title_text="seconds", row=2, col=1)
        fig.update_xaxes(title_text="time since the run's start [s]", row=2, col=1)
    elif series.get("resources"):
        fig = go.Figure()
        for r in series["resources"]:
            fig.add_trace(
                go.Scatter(
                    x=r["t"],
                    y=r["score"],
                    mode="lines",
                    name=f"{_p(r['node'])} {_p(r['resource'])}",
                )
            )
        fig.add_hline(y=1.0, line_dash="dash", annotation_text="saturated")
        fig.update_layout(title="resource saturation score (value / threshold)")
        fig.update_xaxes(title_text="time since the run's start [s]")
    else:
        return parts[0] + "<p>No request records or resource metrics over time.</p>"
    for ep in episodes[:400]:
        fig.add_vrect(
            x0=ep["start"],
            x1=ep["end"],
            fillcolor=colour.get(ep["tier"], "#999"),
            opacity=0.25,
            line_width=0,
            layer="below",
        )
    parts.append(_div(fig, 620 if tl is not None else 420))
    v = doc["vlrt"]
    explained = (
        ""
        if v["explained_fraction"] is None
        else (f", of which {v['explained']} ({v['explained_fraction']:.0%}) overlap an episode")
    )
    parts.append(
        f"<p>{len(episodes)} episode(s) (shaded in the tier's colour). {v['count']} request(s) "
        f"took at least {v['threshold_s']:g} s end to end{explained}.</p>"
    )
    groups = doc.get("episode_groups", [])
    group_of = {i: n for n, g in enumerate(groups, start=1) for i in g["episodes"]}
    if groups:
        causes = "".join(
            f"<tr><td>{n}</td><td>{_e(g['kind'])}</td><td>{_e(g['summary'])}</td>"
            f"<td>{_e(g['root_tier'])}</td><td>{_e(g['resource'])}</td><td>{g['count']}</td>"
            f"<td>{_period(g)}</td><td>{_n(g['typical_duration_s'], 3)}</td>"
            f"<td>{_n(g['busy_fraction'], 2)}</td><td>{g['vlrt_requests']}</td></tr>"
            for n, g in enumerate(groups, start=1)
        )
        parts.append(
            "<p>Causes: the episodes grouped into periodic trains, saturation intervals and "
            "one-offs, largest first.</p><table><tr><th>group</th><th>kind</th><th>summary</th>"
            "<th>root</th><th>resource</th><th>episodes</th><th>period [s]</th>"
            "<th>typical duration [s]</th><th>busy share</th><th>VLRT</th></tr>"
            f"{causes}</table>"
        )
    if episodes:
        rows = "".join(
            f"<tr><td>{group_of.get(i, '—')}</td>"
            f"<td>{e['start']:.3f}</td><td>{e['duration']:.3f}</td><td>{_e(e['tier'])}</td>"
            f"<td>{_e(e['resource'])}</td><td>{_e(e['kind'])}</td><td>{_n(e['peak_queue'])}</td>"
            f"<td>{_n(e['delay_s'], 3)}</td><td>{_e(e['root_tier'])}</td>"
            f"<td>{_e(' → '.join(e['onset_order']))}</td><td>{e['vlrt_requests']}</td></tr>"
            for i, e in enumerate(episodes[:200])
        )
        parts.append(
            "<table><tr><th>group</th><th>start [s]</th><th>duration [s]</th><th>tier</th>"
            "<th>resource</th>"
            "<th>kind</th><th>peak queue</th><th>delay [s]</th><th>root tier</th>"
            f"<th>onset order</th><th>VLRT</th></tr>{rows}</table>"
        )
    loads = doc["tier_loads"]
    if loads:
        items = "".join(
            f"<li>{_e(t['tier'])}: saturation load q* = {_n(t['saturation_load'])} requests, "
            f"capacity {_n(t['capacity'])}/s, {t['bottleneck_windows']} of {t['windows']} "
            "windows beyond q*</li>"
            for t in loads
        )
        parts.append(f"<ul>{items}</ul>")
    return "\n".join(parts)


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;
max-width:1200px;color:#24292e;line-height:1.45}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #e1e4e8;padding-bottom:4px}
table{border-collapse:collapse;font-size:0.85em;margin:8px 0}
td,th{border:1px solid #e1e4e8;padding:3px 6px;vertical-align:top;text-align:left}
th{background:#f6f8fa}.note{color:#b08800}dt{font-family:monospace;margin-top:6px}
"""

GUARD = """
window.__tierscopeErrors = [];
window.addEventListener('error', function (e) {
  window.__tierscopeErrors.push(String(e.message));
});
window.addEventListener('load', function () {
  var plots = document.querySelectorAll('.js-plotly-plot').length;
  document.body.setAttribute('data-plots', String(plots));
  document.body.setAttribute('data-errors', JSON.stringify(window.__tierscopeErrors));
});
"""


def _learned_section(learned: dict[str, Any] | None) -> str:
    """What a saved classifier learnt and what it says of this run, level by level."""
    if learned is None:
        return ""
    parts = ["<h2>Learned indicators</h2>"]
    ev = learned.get("evaluation")
    if ev:
        mm = ev.get("major_mistake_rate")
        parts.append(
            f"<p>Model <b>{_e(ev['best'])}</b> for <b>{_e(ev['target'])}</b>, features "
            f"{_e(ev['features'])}: accuracy {ev['accuracy']:.1%} on setups it never saw "
            f"(scheme {_e(ev['scheme'])}, {ev['setups']} setups, {ev['folds']} folds), against "
            f"{ev['baseline']:.1%} for always answering the majority class"
            + ("" if mm is None else f"; major mistakes {mm:.1%}")
            + ".</p>"
        )
        if ev.get("importance"):
            rows = "".join(
                f"<tr><td>{_e(d['metric'])}</td><td>{d['accuracy_drop']:.2%}</td></tr>"
                for d in ev["importance"][:10]
            )
            parts.append(
                "<p>The metrics it relies on most (accuracy lost when the metric is shuffled):"
                f"</p><table><tr><th>metric</th><th>accuracy drop</th></tr>{rows}</table>"
            )
    targets = list(learned.get("targets", {}))
    head = "".join(f"<th>model: {_e(t)}</th>" for t in targets)
    rows = ""
    for lv in learned["levels"]:
        cells = "".join(
            f"<td>{_e(lv.get(t))} ({lv.get(t + '_share', 0):.0%} of windows)</td>" for t in targets
        )
        rows += (
            f"<tr><td>{_e(lv['setup'])}</td><td>{_n(lv['level'])}</td><td>{lv['windows']}</td>"
            f"<td>{_e(lv['label'])}</td><td>{_e(lv['bottleneck_tier'])}</td>{cells}</tr>"
        )
    parts.append(
        f"<p>The model's answer for each {learned['window_s']:g} s window of this run, by level "
        "(majority of the windows), beside the analysis above:</p>"
        "<table><tr><th>setup</th><th>level</th><th>windows</th><th>analysis: label</th>"
        f"<th>analysis: bottleneck tier</th>{head}</tr>{rows}</table>"
    )
    return "\n".join(parts)


def _calibration_section(cal: dict[str, Any] | None) -> str:
    """Model vs measurement: the calibrated queueing model's prediction of every level."""
    if cal is None:
        return ""
    f = cal["figure"]
    users = f["level"]
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("Throughput [requests/s]", "Response time [ms]"),
        horizontal_spacing=0.1,
    )

    # (column, series, model?, name, colour, extra style, confidence half-widths, scale)
    traces = [
        (1, "measured_throughput", False, "measured X", "#1f77b4", {}, None, 1.0),
        (1, "predicted_throughput", True, "model X", "#1f77b4", {}, "predicted_throughput_hw", 1.0),
        (2, "measured_rt_mean", False, "measured mean R", "#d62728", {}, None, 1e3),
        (2, "predicted_rt_mean", True, "model mean R", "#d62728", {}, "predicted_rt_mean_hw", 1e3),
        (
            2,
            "measured_rt_p95",
            False,
            "measured p95",
            "#ff7f0e",
            {"symbol": "diamond", "size": 8},
            None,
            1e3,
        ),
        (2, "predicted_rt_p95", True, "model p95", "#ff7f0e", {"dash": "dot"}, None, 1e3),
    ]
    for col, key, model, name, colour, style, hw, k in traces:
        y = [None if v is None else k * v for v in f[key]]
        look = (
            {"mode": "lines", "line": {"color": colour, "dash": "dash", **style}}
            if model
            else {"mode": "markers", "marker": {"size": 9, "color": colour, **style}}
        )
        if hw is not None:
            look["error_y"] = {
                "type": "data",
                "array": [k * (h or 0.0) for h in f[hw]],
                "visible": True,
            }
        fig.add_scatter(x=users, y=y, name=name, row=1, col=col, **look)
    fig.update_xaxes(title_text="users")
    fig.update_yaxes(type="log", row=1, col=2)
    s = cal.get("summary") or {}
    peak, r70 = s.get("peak_throughput") or {}, s.get("rt_at_70pct_peak")
    text = (
        f"<p>The run's calibrated queueing model (solver {_e(cal.get('solver'))}), every level "
        f"predicted: peak throughput measured {_n(peak.get('measured'))}/s, predicted "
        f"{_n(peak.get('predicted'))}/s ({signed_pct(peak.get('error'))})"
    )
    if r70:
        text += (
            f"; mean response time at 70 % of the peak ({_n(r70['users'], 3)} users) measured "
            f"{_n(1e3 * r70['measured'], 3)} ms, predicted {_n(1e3 * r70['predicted'], 3)} ms "
            f"({signed_pct(r70['error'])})"
        )
    text += ". Dashed: the model (bars: 95 % confidence of the simulation); markers: measured.</p>"
    return "\n".join(["<h2>Model vs measurement</h2>", text, _div(fig, 440)])


def render(
    doc: dict[str, Any],
    series: dict[str, Any],
    title: str = "tierscope report",
    learned: dict[str, Any] | None = None,
    calibration: dict[str, Any] | None = None,
    graph: dict[str, Any] | None = None,
) -> str:
    """The report page as one HTML string (plotly.js included: no network needed); ``graph``:
    the run's call graph (``Graph.to_json``), drawn with each component's state."""
    notes = "".join(f'<p class="note">Note: {_e(n)}</p>' for n in doc["notes"])
    glossary = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in GLOSSARY)
    run = doc.get("run") or {}
    body = "\n".join(
        [
            f"<h1>{_e(title)}</h1>",
            f"<p>Run status: {_e(run.get('status'))}; kind: {_e(run.get('kind'))}; tiers front to "
            f"back: {_e(', '.join(doc['tiers']))}.</p>",
            notes,
            _suspects_section(doc),
            _saturation_section(doc),
            _graph_section(doc, graph),
            _bottleneck_section(doc, series),
            _indicator_section(doc),
            _timeline_section(doc, series),
            _learned_section(learned),
            _calibration_section(calibration),
            "<h2>What the numbers mean</h2>",
            f"<dl>{glossary}</dl>",
            "<h2>Options used</h2>",
            f"<pre>{_e(json.dumps(doc['options'], indent=1))}</pre>",
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{CSS}</style>"
        f"<script>{GUARD}</script>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>'
        f"<body>{body}</body></html>\n"
    )
