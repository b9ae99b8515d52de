"""The whole analysis on a run folder in the experiment runner's format (one time base, setups
with a "+1 node" companion, nodes, client metrics, phases, nested request records), with the
truth planted by the generator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tierscope.analysis import AnalysisOptions, analyze
from tierscope.analysis.datasets import chain_requests
from tierscope.analysis.millibottlenecks import timeline
from tierscope.cli import main
from tierscope.store import RunWriter, read_run

STEADY, RAMP = 20.0, 2.0
RATES = [100.0, 200.0, 300.0, 400.0, 500.0, 600.0]
SERVICE = {
    "s0": {"web": 0.0005, "app": 0.001, "db": 0.0025},  # db saturates at 400/s
    "s1": {"web": 0.0005, "app": 0.001, "db": 0.002},
}  # one more db node: 500/s


def write_runner_like(path: Path) -> None:
    spec = {
        "name": "runner-like",
        "system": {
            "kind": "embedded",
            "topology": "1/1/1",
            "tiers": {"web": {"cpu": 0.5}, "app": {"cpu": 0.5}, "db": {"cpu": 0.3}},
        },
        "workload": {"mode": "open"},
        "sweep": {
            "levels": RATES,
            "repetitions": 1,
            "setups": [
                {"name": "s0", "set": {}},
                {"name": "s1", "set": {"system.tiers.db.cpu": 0.4}, "plus_one_of": "s0"},
            ],
        },
    }
    rng = np.random.default_rng(0)
    with RunWriter.create(path, kind="experiment", spec=spec) as run:
        offset, events, points = 0.0, [], []
        for setup, service in SERVICE.items():
            for rate in RATES:
                n = int(rate * (RAMP + STEADY))
                req = chain_requests(n, rate, service, seed=int(rate), setup=setup, level=rate)
                req = req.with_columns(
                    pl.col("start") + offset,
                    pl.col("end") + offset,
                    pl.concat_str(pl.lit(f"{setup}-{rate:g}-"), "request_id"),
                )
                run.append("requests", req)
                tl = timeline(req, 0.05)
                t = tl.times()
                rows = []
                for tier, s in service.items():
                    util = min(rate * s, 1.0)
                    for node in [f"{tier}-1"] if tier != "app" else ["app-1", "app-2"]:
                        value = np.clip(util + rng.normal(0, 0.01, t.size), 0, 1)
                        rows.append(
                            pl.DataFrame(
                                {
                                    "t": t,
                                    "tier": tier,
                                    "node": node,
                                    "metric": "cpu_util",
                                    "value": value,
                                }
                            )
                        )
                    rows.append(
                        pl.DataFrame(
                            {
                                "t": t,
                                "tier": tier,
                                "node": f"{tier}-1",
                                "metric": "queue_length",
                                "value": tl.tiers[tier].q_mean,
                            }
                        )
                    )
                rows.append(
                    pl.DataFrame(
                        {
                            "t": t,
                            "tier": "client",
                            "node": "client",
                            "metric": "cpu_util",
                            "value": np.full(t.size, 0.2),
                        }
                    )
                )
                rows.append(
                    pl.DataFrame(
                        {
                            "t": t,
                            "tier": "client",
                            "node": "client",
                            "metric": "lag_s",
                            "value": np.full(t.size, 0.001),
                        }
                    )
                )
                run.append(
                    "metrics",
                    pl.concat(rows).with_columns(
                        pl.lit(setup).alias("setup"),
                        pl.lit(rate).alias("level"),
                        pl.lit(0).alias("rep"),
                    ),
                )
                t0, t1 = offset + RAMP, offset + RAMP + STEADY
                client = req.filter(pl.col("tier") == "client")
                done = client.filter((pl.col("end") >= t0) & (pl.col("end") < t1))
                rt = done["end"] - done["start"]
                points.append(
                    {
                        "setup": setup,
                        "level": rate,
                        "rep": 0,
                        "t_start": t0,
                        "t_end": t1,
                        "throughput": done.height / STEADY,
                        "rt_mean": rt.mean(),
                        "rt_p50": rt.quantile(0.5),
                        "rt_p95": rt.quantile(0.95),
                        "rt_p99": rt.quantile(0.99),
                        "errors": 0.0,
                    }
                )
                for phase, a, b in (("ramp_up", offset, t0), ("steady", t0, t1)):
                    detail = json.dumps({"setup": setup, "level": rate, "rep": 0, "phase": phase})
                    events.append(
                        {"t_start": a, "t_end": b, "kind": "phase", "tier": None, "detail": detail}
                    )
                offset = float(req["end"].max()) + 1.0
        run.write("points", pl.DataFrame(points))
        run.write(
            "events",
            pl.DataFrame(
                events,
                schema={
                    "t_start": pl.Float64,
                    "t_end": pl.Float64,
                    "kind": pl.String,
                    "tier": pl.String,
                    "detail": pl.String,
                },
            ),
        )


@pytest.fixture(scope="module")
def runner_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("runner") / "run"
    write_runner_like(path)
    return path


def test_runner_format_end_to_end(runner_run: Path) -> None:
    doc = analyze(read_run(runner_run))
    assert doc["tiers"] == ["client", "web", "app", "db"]  # from spec.system.tiers
    sat = {s["setup"]: s for s in doc["saturation"]}
    # s0 saturates at the db's 400/s: first server level 400
    assert sat["s0"]["peak_throughput"] == pytest.approx(400, rel=0.05)
    assert sat["s0"]["first_server_level"] == 400.0
    assert sat["s0"]["margin_source"].startswith("plus-one:s1")
    assert sat["s1"]["margin_source"] == "from base setup s0"
    assert sat["s0"]["usl"] is not None and sat["s0"]["usl"]["concurrency"] == "little"
    by_level = {(b["setup"], b["level"]): b for b in doc["bottlenecks"]}
    for rate in (400.0, 500.0, 600.0):
        b = by_level[("s0", rate)]
        assert b["kind"] == "single", b["evidence"]
        assert (b["primary"]["tier"], b["primary"]["node"], b["primary"]["resource"]) == (
            "db",
            "db-1",
            "cpu",
        )
    assert by_level[("s0", 100.0)]["kind"] == "none"
    # past its capacity the open system's queues grow through the steady window: the db's and,
    # as nested records push back, every tier in front of it
    assert {q["tier"] for q in by_level[("s0", 600.0)]["growing_queues"]} == {"web", "app", "db"}
    assert by_level[("s0", 200.0)]["growing_queues"] == []
    # the long saturations are episodes of the db tier (nested records: every tier rises, the
    # deepest is the root), placed in their levels
    long = [e for e in doc["episodes"] if e["kind"] == "saturation"]
    assert long and {e["root_tier"] for e in long} == {"db"}
    assert {(e["setup"], e["level"]) for e in long if e["tier"] == "db"} >= {
        ("s0", 500.0),
        ("s0", 600.0),
        ("s1", 600.0),
    }
    assert all(e["resource"] == "cpu" for e in long if e["tier"] == "db")
    assert doc["vlrt"]["count"] > 0 and doc["vlrt"]["explained_fraction"] > 0.95


def test_client_limited_level_is_reported(tmp_path: Path, runner_run: Path) -> None:
    run = read_run(runner_run)
    hot = run.metrics.with_columns(
        pl.when(
            (pl.col("tier") == "client")
            & (pl.col("metric") == "cpu_util")
            & (pl.col("level") == 200.0)
        )
        .then(1.0)
        .otherwise(pl.col("value"))
        .alias("value")
    )
    doc = analyze(run.__class__(run.path, run.info, hot, run.requests, run.events, run.points))
    b = next(b for b in doc["bottlenecks"] if (b["setup"], b["level"]) == ("s0", 200.0))
    assert b["kind"] == "client"
    assert any("load generator limited" in n for n in doc["notes"])


def test_cli_report_on_runner_format(runner_run: Path) -> None:
    assert main(["report", str(runner_run)]) == 0
    assert (runner_run / "report.html").stat().st_size > 1_000_000


def test_slo_point_and_intervention_point(runner_run: Path) -> None:
    run = read_run(runner_run)
    doc = analyze(run, AnalysisOptions(slo_s=0.3))
    s0 = next(s for s in doc["saturation"] if s["setup"] == "s0")
    # rt_p95 stays far below 0.3 s up to 300/s and exceeds it from 400/s on
    p95 = {c["level"]: c["rt_p95"] for c in s0["curve"]}
    assert p95[300.0] < 0.3 < p95[400.0]
    assert s0["slo_level"] == 300.0
    # Malkowski's eq. (10) on the SLO satisfaction per level, recomputed here from the records
    client = run.requests.filter(pl.col("tier") == "client")
    sat = []
    for p in run.points.filter(pl.col("setup") == "s0").sort("level").iter_rows(named=True):
        inside = client.filter(
            (pl.col("start") >= p["t_start"])
            & (pl.col("start") < p["t_end"])
            & (pl.col("end") <= p["t_end"])
        )
        sat.append(float(((inside["end"] - inside["start"]) <= 0.3).mean()))
    expected = None
    for k in range(1, len(sat)):
        v = np.array(sat[: k + 1])
        if v.mean() - 1.96 * v.std(ddof=1) < 0.90:
            expected = RATES[k]
            break
    assert s0["slo_intervention_level"] == expected is not None
