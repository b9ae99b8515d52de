"""Simulated runs as store folders: the millibottleneck acceptance test and the conversions.

Acceptance (issue "outputs for analysis"): on a 3-tier model with a 300 ms stall injected every
5 s at the middle tier, the run folder reproduces the stalls in events.parquet, per-tier queue
lengths peak in the windows that follow each stall, and Little's law holds per tier between the
trace, the time series and the summary statistics.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tierscope.cli import main
from tierscope.errors import InputError
from tierscope.sim import SimResult, record_simulation, simulate
from tierscope.sim import trace as tr
from tierscope.spec import load_model, parse_model
from tierscope.spec.model import Model
from tierscope.store import Run, read_run

ROOT = Path(__file__).resolve().parents[2]
TWIN = ROOT / "examples" / "models" / "millibottleneck-twin.yaml"
SIM_TIME = 30.0
WINDOW = 0.05
STALLS = [5.0, 10.0, 15.0, 20.0, 25.0]  # start 5 s, period 5 s, before the end at 30 s
STALL_S = 0.3
TIERS = ("web", "app", "db")


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, SimResult]:
    run_dir = tmp_path_factory.mktemp("twin") / "run"
    result = record_simulation(
        load_model(TWIN), run_dir, seed=7, precision=0.001, max_time=SIM_TIME, window=WINDOW
    )
    return read_run(run_dir), result


def _series(run: Run, tier: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
    assert run.metrics is not None
    df = run.metrics.filter((pl.col("tier") == tier) & (pl.col("metric") == metric)).sort("t")
    return df["t"].to_numpy(), df["value"].to_numpy()


def test_run_folder_is_complete(twin: tuple[Run, SimResult]) -> None:
    run, result = twin
    assert run.status == "complete"
    assert run.info["seed"] == 7
    assert run.info["options"]["window"] == WINDOW
    assert parse_model(run.info["spec"]) == load_model(TWIN)
    assert run.info["summary"]["stations"]["app"]["queue_length"] == pytest.approx(
        result.to_dict()["stations"]["app"]["queue_length"]
    )
    assert result.stats["simulated_time"] == SIM_TIME
    assert result.stats["window"] == WINDOW
    assert run.metrics is not None and run.requests is not None and run.points is not None
    t, _ = _series(run, "app", "queue_length")
    assert len(t) == round(SIM_TIME / WINDOW)
    np.testing.assert_allclose(np.diff(t), WINDOW)
    assert set(run.metrics["metric"]) == {
        "queue_length",
        "queue_length_max",
        "utilization",
        "arrivals",
        "completions",
        "drops",
        "rt_mean",
        "rt_max",
    }
    assert set(run.metrics["tier"]) == {*TIERS, "client"}  # think-time hub not reported
    assert set(run.requests["tier"]) == {*TIERS, "client"}
    assert run.requests["request_id"].str.starts_with("r0-").all()
    assert run.points.height == 1
    x = run.points["throughput"][0]
    assert x == pytest.approx(result.to_dict()["classes"]["browse"]["throughput"], rel=0.01)
    assert 0 < run.points["rt_p50"][0] < run.points["rt_p99"][0]


def test_events_reproduce_the_stalls(twin: tuple[Run, SimResult]) -> None:
    run, _ = twin
    assert run.events is not None
    stalls = run.events.filter(pl.col("kind") == "stall").sort("t_start")
    assert stalls["t_start"].to_list() == pytest.approx(STALLS)
    assert (stalls["t_end"] - stalls["t_start"]).to_list() == pytest.approx([STALL_S] * 5)
    assert set(stalls["tier"]) == {"app"}
    assert set(stalls["detail"]) == {"factor=0"}


def test_queues_peak_in_the_windows_that_follow_each_stall(twin: tuple[Run, SimResult]) -> None:
    run, _ = twin
    t, app = _series(run, "app", "queue_length")
    _, db = _series(run, "db", "queue_length")
    tc, client_rt_max = _series(run, "client", "rt_max")
    app_median, db_median = np.median(app), np.median(db)
    for s in STALLS:
        after = (t >= s - 1e-9) & (t < s + 1.0)
        # the stalled tier: its queue builds up during the stall and peaks by its end
        i = int(np.argmax(np.where(after, app, -np.inf)))
        assert s <= t[i] < s + STALL_S + 0.5, (s, t[i])
        assert app[i] > 10 * app_median and app[i] > app_median + 20, (s, app[i], app_median)
        # the tier downstream gets the burst when the stalled tier drains, after the stall
        j = int(np.argmax(np.where(after, db, -np.inf)))
        assert s + STALL_S - 1e-9 <= t[j] < s + 1.0, (s, t[j])
        assert db[j] > 3 * db_median, (s, db[j], db_median)
        # and requests caught in the stall take longer than the stall end to end (VLRT)
        caught = (tc >= s - 1e-9) & (tc < s + 1.0)
        assert client_rt_max[caught].max() >= STALL_S * 0.9


def test_littles_law_per_tier(twin: tuple[Run, SimResult]) -> None:
    run, result = twin
    assert run.requests is not None
    summary = result.to_dict()["stations"]
    warmup = result.stats["warmup_time"]
    total = 0.0
    for tier in TIERS:
        req = run.requests.filter(pl.col("tier") == tier)
        start, end = req["start"].to_numpy(), req["end"].to_numpy()
        assert (end <= SIM_TIME).all() and (start <= end).all()
        # mean number present, from the trace: total time spent there / duration
        l_trace = float((end - start).sum()) / SIM_TIME
        _, q = _series(run, tier, "queue_length")
        assert l_trace == pytest.approx(q.mean(), rel=0.02), tier
        # the summary is over the steady part [warm-up, end]
        overlap = np.clip(end, warmup, SIM_TIME) - np.clip(start, warmup, SIM_TIME)
        l_steady = float(overlap.sum()) / (SIM_TIME - warmup)
        assert l_steady == pytest.approx(summary[tier]["queue_length"], rel=0.02), tier
        # L = X W with X and W measured on the trace, L on the engine's time integral
        steady = start >= warmup
        x = steady.sum() / (SIM_TIME - warmup)
        w = float((end - start)[steady].mean())
        assert x * w == pytest.approx(summary[tier]["queue_length"], rel=0.03), tier
        assert w == pytest.approx(summary[tier]["response_time"], rel=0.03), tier
        total += l_trace
    client = run.requests.filter(pl.col("tier") == "client")
    l_client = float((client["end"] - client["start"]).sum()) / SIM_TIME
    assert l_client == pytest.approx(total, rel=0.02)  # a request is always at some tier


def test_simulate_streams_chunks_with_the_requested_window() -> None:
    model = load_model(TWIN)
    seen: list[tuple[int, dict[str, Any]]] = []
    result = simulate(
        model,
        seed=3,
        precision=0.001,
        max_time=4.0,
        replications=2,
        window=0.1,
        trace=True,
        on_chunk=lambda r, out: seen.append((r, out)),
    )
    assert result.stats["window"] == 0.1
    assert {r for r, _ in seen} == {0, 1}
    assert all(out["window"] == 0.1 and "trace" in out for _, out in seen)
    n_windows = sum(len(out["windows"]["t_start"]) for r, out in seen if r == 0)
    assert n_windows == 40
    layout = tr.Layout.of(model)
    frame = tr.requests_frame(seen[-1][1]["trace"], layout, rep=seen[-1][0])
    assert frame["request_id"].str.starts_with("r1-").all()
    assert set(frame.columns) >= {"tier", "request_id", "start", "end", "interaction", "status"}
    assert set(frame["tier"]) <= {*TIERS, "client"}
    assert set(frame["interaction"]) == {"browse"}


def test_without_window_the_pilot_chooses_it_and_no_trace_is_made() -> None:
    seen: list[dict[str, Any]] = []
    result = simulate(
        load_model(TWIN), precision=0.05, max_time=2.0, on_chunk=lambda _, out: seen.append(out)
    )
    assert 0 < result.stats["window"] < 2.0
    assert seen and all("trace" not in out for out in seen)


@pytest.mark.parametrize("window", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_window_is_refused(window: float) -> None:
    with pytest.raises(InputError, match="window"):
        simulate(load_model(TWIN), window=window)


def _model(
    perturbations: list[dict[str, Any]], schedules: list[dict[str, Any]] | None = None
) -> Model:
    return parse_model(
        {
            "stations": [{"name": "a"}, {"name": "b"}],
            "classes": [{"name": "c", "population": 3, "demands": {"a": 0.1, "b": 0.2}}],
            "simulation": {"perturbations": perturbations, "schedules": schedules or []},
        }
    )


def test_events_expand_periods_until_the_end() -> None:
    model = _model(
        [
            {"station": "a", "factor": 0, "start": 1, "duration": 0.5, "period": 2, "until": 6},
            {"station": "b", "factor": 0.5, "start": 3, "duration": 1},
            {"station": "b", "factor": 0.25, "start": 50, "duration": 1},
            {"station": "b", "factor": 2, "start": 7, "duration": 1, "period": 5, "until": 6},
        ],
        [{"class": "c", "times": [0, 4], "values": [3, 1]}],
    )
    ev = tr.events_frame(model, end=10.0)
    stalls = ev.filter(pl.col("kind") == "stall")
    assert stalls["t_start"].to_list() == [1.0, 3.0, 5.0]  # until 6 stops the 4th
    assert stalls["t_end"].to_list() == [1.5, 3.5, 5.5]
    slow = ev.filter(pl.col("kind") == "slowdown")
    assert slow.rows() == [(3.0, 4.0, "slowdown", "b", "factor=0.5")]  # the one at 50 is later
    assert ev.filter(pl.col("kind") == "speedup").height == 0  # starts after its 'until'
    load = ev.filter(pl.col("kind") == "load")
    assert load.rows() == [
        (0.0, 4.0, "load", "client", "class=c;population=3"),
        (4.0, 10.0, "load", "client", "class=c;population=1"),
    ]
    assert tr.events_frame(_model([]), end=10.0).height == 0


def test_engine_schedule_of_perturbations_matches_the_events() -> None:
    """The stalls in events.parquet are the ones the engine applied: no service in them."""
    model = _model([{"station": "a", "factor": 0, "start": 1, "duration": 0.5, "period": 2}])
    seen: list[dict[str, Any]] = []
    simulate(model, precision=0.001, max_time=9.0, trace=True, on_chunk=lambda _, o: seen.append(o))
    frame = pl.concat(tr.requests_frame(o["trace"], tr.Layout.of(model), rep=0) for o in seen)
    ends = frame.filter(pl.col("tier") == "a")["end"].to_numpy()
    for s in tr.events_frame(model, end=9.0)["t_start"]:
        inside = (ends > s + 1e-9) & (ends < s + 0.5 - 1e-9)
        assert not inside.any(), s  # nothing completes at a stalled station


def test_simulate_cli_writes_the_run_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    args = ["model", "simulate", str(TWIN), "--trace", str(run_dir), "--window", "0.05"]
    code = main([*args, "--max-time", "6", "--precision", "0.001", "--seed", "2", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)  # stdout holds the summary only
    assert doc["method"] == "simulation" and doc["stats"]["window"] == 0.05
    run = read_run(run_dir)
    assert run.status == "complete" and run.info["options"]["source"] == str(TWIN)
    assert run.events is not None and run.events["t_start"].to_list() == [5.0]
    # a second run into the same folder is refused, naming it
    assert main([*args, "--max-time", "1"]) == 2
    assert str(run_dir) in capsys.readouterr().err
