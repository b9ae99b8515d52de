"""Rich tables of the estimate, calibrate, whatif and plan documents (``--json`` prints the
documents themselves, so the two never disagree)."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tierscope.report.terminal import fmt, signed_pct


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v * 1e3:.3g}"


def _notes(doc: dict[str, Any]) -> list[RenderableType]:
    return [Text(f"note: {n}", style="yellow") for n in doc.get("notes", [])]


def estimate(doc: dict[str, Any], title: str) -> RenderableType:
    unit = "CPU s" if doc.get("unit") == "cpu_s" else "s"
    table = Table(title=f"{title} — method: {doc['method']}", title_justify="left")
    for col in ("station", "class", f"demand [{unit}]", f"{doc.get('confidence', 0.95):.0%} CI"):
        table.add_column(col, justify="left" if col in ("station", "class") else "right")
    for st, by_class in doc["demands"].items():
        for cl, d in by_class.items():
            ci = doc.get("ci", {}).get(st, {}).get(cl)
            table.add_row(
                st, cl, fmt(d, 4), "—" if ci is None else f"[{fmt(ci[0], 4)}, {fmt(ci[1], 4)}]"
            )
    extra = []
    if "sd" in doc:
        sd = doc["sd"]
        extra.append(
            Text(
                f"SD: {sd['states_kept']} states kept, divergence {fmt(sd['divergence'], 3)}, "
                f"{sd['run_time_s']:.2f} s",
                style="dim",
            )
        )
        marginals = sd.get("marginals", {})
        if "ci" in marginals:
            sd_m, ci_m = marginals["sd"], marginals["ci"]
            ci_d = ", ".join(
                f"{st} {fmt(v, 3)}" for st, by in sd["ci_demands"].items() for v in by.values()
            )
            extra.append(
                Text(
                    f"marginals vs observed — KL: SD {fmt(sd_m['kl'], 3)}, CI {fmt(ci_m['kl'], 3)}"
                    f" · Hellinger: SD {fmt(sd_m['hellinger'], 3)}, CI {fmt(ci_m['hellinger'], 3)}"
                    f" (CI's demands: {ci_d})"
                )
            )
    return Group(table, *extra, *_notes(doc))


def calibration(doc: dict[str, Any], title: str) -> RenderableType:
    if doc.get("kind") == "cassandra":
        return cassandra_calibration(doc, title)
    m = doc["model"]
    tiers = Table(title=f"{title} — calibrated model ({doc['solver']})", title_justify="left")
    cols = ("tier", "replicas", "cpu/replica", "demand [ms CPU]", "contention", "background")
    for col in (*cols, "max X [1/s]"):
        tiers.add_column(col, justify="left" if col == "tier" else "right")
    for name, t in m["tiers"].items():
        c = t.get("contention") or 0.0
        tiers.add_row(
            name,
            str(t["replicas"]),
            fmt(t["cpu"], 3),
            f"{t['demand'] * 1e3:.4g}",
            f"+{c:.1%}/request, to {t['contention_upto']:.3g}" if c else "-",
            fmt(t["background"], 3),
            fmt(t["max_throughput"], 4),
        )
    levels = Table(title="model vs measurement", title_justify="left")
    cols = (
        "users",
        "X meas.",
        "X pred.",
        "err",
        "R meas. [ms]",
        "R pred. [ms]",
        "err",
        "p95 meas.",
        "p95 pred.",
    )
    # The bottleneck's throttled CFS periods, measured and simulated: is the quota modelled well?
    bn = m["bottleneck"]
    throttled = any(bn in (r["predicted"].get("throttled") or {}) for r in doc["levels"])
    if throttled:
        cols += (f"{bn} thr. % m/p",)
    for col in cols:
        levels.add_column(col, justify="right")

    def share(v: float | None) -> str:
        return "–" if v is None else f"{100 * v:.0f}"

    for r in doc["levels"]:
        me, pr, er = r["measured"], r["predicted"], r["error"]
        extra = (
            (
                f"{share((me.get('throttled') or {}).get(bn))}/"
                f"{share((pr.get('throttled') or {}).get(bn))}",
            )
            if throttled
            else ()
        )
        levels.add_row(
            fmt(r["level"], 4),
            fmt(me["throughput"], 4),
            fmt(pr["throughput"], 4),
            signed_pct(er["throughput"]),
            _ms(me["rt_mean"]),
            _ms(pr["rt_mean"]),
            signed_pct(er["rt_mean"]),
            _ms(me.get("rt_p95")),
            _ms(pr.get("rt_p95")),
            *extra,
        )
    s = doc["summary"]
    peak = s["peak_throughput"]
    lines = [
        Text(
            f"think time {m['think_time']:.4g} s, outside delay {m['outside_delay'] * 1e3:.3g} ms; "
            f"bottleneck {m['bottleneck']} (max {fmt(m['max_throughput'], 4)}/s)"
            + (
                ""
                if not m.get("host")
                else f"; host {m['host']['cores']:g} cores, "
                f"{m['host']['background']:.2g} used by other processes"
            )
        ),
        Text(
            f"peak throughput: measured {fmt(peak['measured'], 4)}/s, predicted "
            f"{fmt(peak['predicted'], 4)}/s ({signed_pct(peak['error'])})",
            style="bold",
        ),
    ]
    r70 = s.get("rt_at_70pct_peak")
    if r70:
        lines.append(
            Text(
                f"mean response time at 70 % of peak ({r70['users']:.3g} users): measured "
                f"{_ms(r70['measured'])} ms, predicted {_ms(r70['predicted'])} ms "
                f"({signed_pct(r70['error'])})",
                style="bold",
            )
        )
    return Group(tiers, levels, *lines, *_notes(doc))


def whatif(doc: dict[str, Any], title: str) -> RenderableType:
    table = Table(title=f"{title} — what if {', '.join(doc['changes'])}", title_justify="left")
    cols = (
        "users",
        "X meas.",
        "X now",
        "X changed",
        "R meas. [ms]",
        "R now [ms]",
        "R changed [ms]",
        "p95 changed [ms]",
    )
    for col in cols:
        table.add_column(col, justify="right")
    for r in doc["levels"]:
        me = r.get("measured", {}).get("measured", {}) if r.get("measured") else {}
        b, c = r["baseline"], r["changed"]
        table.add_row(
            str(r["users"]),
            fmt(me.get("throughput"), 4),
            fmt(b["throughput"], 4),
            fmt(c["throughput"], 4),
            _ms(me.get("rt_mean")),
            _ms(b["rt_mean"]),
            _ms(c["rt_mean"]),
            _ms(c.get("rt_p95")),
        )
    cap = doc["capacity"]
    line = Text(
        f"capacity {fmt(cap['baseline'], 4)}/s ({cap['baseline_bottleneck']}) -> "
        f"{fmt(cap['changed'], 4)}/s ({cap['changed_bottleneck']})",
        style="bold",
    )
    return Group(table, line)


def plan(doc: dict[str, Any], title: str) -> RenderableType:
    table = Table(title=f"{title} — SLO {', '.join(doc['slo'])}", title_justify="left")
    cols = (
        "users",
        "cheapest",
        "cpu web/app/db",
        "$/h",
        "p95 [ms]",
        "profit-optimal",
        "cpu",
        "profit $/h",
    )
    for col in cols:
        table.add_column(col, justify="right")

    def cpus(e: dict[str, Any]) -> str:
        return "/".join(fmt(t["cpu"], 2) for t in e["tiers"].values())

    for lv in doc["levels"]:
        c, p = lv["cheapest"], lv["profit_optimal"]
        table.add_row(
            str(lv["users"]),
            c["topology"] if c else "none",
            cpus(c) if c else "—",
            fmt(c["cost_per_hour"], 3) if c else "—",
            _ms(c["predicted"].get("rt_p95")) if c else "—",
            p["topology"] if p else "—",
            cpus(p) if p else "—",
            fmt(p["profit_per_hour"], 3) if p else "—",
        )
    rule = Text(
        f"predicted with every demand {doc['demand_margin']:.0%} above the measured; the SLO "
        f"met with {doc['margin']:.0%} to spare",
        style="dim",
    )
    hints = [
        Text(
            f"{lv['users']} users: tierscope run SPEC "
            + " ".join(f"--set {o}" for o in lv["cheapest"]["overrides"]),
            style="dim",
        )
        for lv in doc["levels"]
        if lv["cheapest"]
    ]
    return Group(table, rule, *_notes(doc), *hints)


def cassandra_calibration(doc: dict[str, Any], title: str) -> RenderableType:
    """Dipietro's model calibrated on one setup, every setup's levels predicted."""
    m, me = doc["model"], doc["measured"]
    costs = m["costs"]
    head = Text(
        f"{title} — Cassandra model ({m['nodes']} nodes, RF {m['replication']}) calibrated on "
        f"setup {doc['setup']} ({m['consistency'].upper()}): a read cost "
        f"{me['cpu_per_read'] * 1e3:.3g} ms of node CPU with {me['reads_per_read']:.2f} replica "
        f"reads and {me['answers_per_read']:.2f} answers from other nodes — coordinate "
        f"{costs['coordinate'] * 1e3:.3g} ms, read {costs['read'] * 1e3:.3g} ms, each side of a "
        f"replica request {costs['message'] * 1e3:.3g} ms; own replica read first "
        f"{m['local_first']:.0%}; client {m['client_cpu'] * 1e3:.3g} ms CPU + "
        f"{m['client_delay'] * 1e3:.3g} ms outside",
        style="bold",
    )
    table = Table(title_justify="left")
    cols = ("setup", "CL", "users", "X meas.", "X model", "error", "R meas. [ms]", "R model [ms]",
            "error", "CPU/read meas. [ms]", "model [ms]")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="left" if col in ("setup", "CL") else "right")
    for r in doc["levels"]:
        table.add_row(
            r["setup"] + ("" if r["role"] == "prediction" else " (calibration)"),
            r["consistency"].upper(),
            str(r["level"]),
            fmt(r["throughput"], 4),
            fmt(r["throughput_model"], 4),
            signed_pct(r["throughput_error"]),
            _ms(r["rt_mean"]),
            _ms(r["rt_model"]),
            signed_pct(r["rt_error"]),
            _ms(r["cpu_per_read"]),
            _ms(r["cpu_per_read_model"]),
        )
    lines = [
        Text(
            f"{name}: throughput error {s['throughput_error_mean']:.1%} on average (at most "
            f"{s['throughput_error_max']:.1%}), response time {s['rt_error_mean']:.1%} (at most "
            f"{s['rt_error_max']:.1%})" + (" — predicted" if s["role"] == "prediction" else ""),
        )
        for name, s in doc["summary"]["setups"].items()
    ]
    return Group(head, table, *lines, *_notes(doc))


def control(doc: dict[str, Any], title: str) -> RenderableType:
    """One controller's intervals, or every controller's totals side by side."""
    runs = doc.get("policies", [doc])
    summary = Table(title=f"{title} — {doc['trace']['source']}, SLO {runs[0]['slo']}",
                    title_justify="left")  # fmt: skip
    for col in ("policy", "SLA met", "node-hours", "changes", "under [s]"):
        summary.add_column(col, justify="left" if col == "policy" else "right")
    for r in runs:
        summary.add_row(r["policy"], f"{r['sla_satisfaction']:.1%}", f"{r['node_hours']:.3f}",
                        str(r["reconfigurations"]), f"{r['under_provisioned_s']:.0f}")  # fmt: skip
    if "policies" in doc:
        return summary
    table = Table(title="intervals", title_justify="left")
    for col in ("t [s]", "load", "replicas", "serving", "SLA met", "X [1/s]"):
        table.add_column(col, justify="right")
    for row in doc["intervals"]:
        table.add_row(
            f"{row['t']:.0f}", fmt(row["load"], 3), "/".join(map(str, row["config"].values())),
            "/".join(map(str, row["running"].values())), f"{row['sla']:.1%}",
            fmt(row["throughput"], 3),
        )  # fmt: skip
    return Group(summary, table)
