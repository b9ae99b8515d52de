"""Episode groups against planted truth: periodic stall trains (phase restarting per level, as
the runner schedules faults), one-off stalls, a sustained overload, and random (Poisson or
quasi-regular) stalls that must never be called periodic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.analysis.test_analyze import RATES, write_runner_like
from tests.analysis.test_analyze import SERVICE as RUNNER_SERVICE
from tierscope.analysis import analyze
from tierscope.analysis.datasets import Stall, chain_requests, chain_sweep
from tierscope.analysis.episodes import group_episodes
from tierscope.ingest.csv import import_csv
from tierscope.sim import record_simulated_sweep
from tierscope.spec import load_model
from tierscope.store import Run, read_run

ROOT = Path(__file__).resolve().parents[2]
TWIN = ROOT / "examples" / "models" / "millibottleneck-twin.yaml"
SERVICE = {"web": 0.0008, "app": 0.0012, "db": 0.001}
LEVELS = {10: 150.0, 20: 250.0, 30: 350.0, 40: 450.0, 50: 550.0}
LENGTH, GAP = 30.0, 3.0


def sweep_run(req: pl.DataFrame, points: pl.DataFrame) -> Run:
    return Run(
        path=Path("synthetic"),
        info={"spec": {"system": {"tiers": {"web": {}, "app": {}, "db": {}}}}},
        metrics=None,
        requests=req,
        events=None,
        points=points,
    )


def level_start(level: float) -> float:
    return list(LEVELS).index(level) * (LENGTH + GAP)


def groups_of(doc: dict, kind: str) -> list[dict]:
    return [g for g in doc["episode_groups"] if g["kind"] == kind]


def hits(doc: dict, t: float, duration: float) -> set[int]:
    return {i for i, e in enumerate(doc["episodes"]) if e["start"] < t + duration and e["end"] > t}


def assert_partition(doc: dict) -> None:
    """Every episode is in exactly one group, periodic trains first, one-offs last."""
    seen = [i for g in doc["episode_groups"] for i in g["episodes"]]
    assert sorted(seen) == list(range(len(doc["episodes"])))
    order = {"periodic": 0, "saturation": 1, "one-off": 2}
    kinds = [order[g["kind"]] for g in doc["episode_groups"]]
    assert kinds == sorted(kinds)
    assert all(g["summary"] for g in doc["episode_groups"])


def test_a_planted_train_is_one_periodic_group_and_the_one_offs_stay_apart() -> None:
    period = 3.7
    rng = np.random.default_rng(4)
    stalls: dict[float, list[Stall]] = {}
    train: list[float] = []
    for level in LEVELS:
        # the phase restarts with each level; a quarter of the occurrences never happen
        times = np.arange(rng.uniform(0.5, 0.5 + period), LENGTH - 1.0, period)
        times = times[rng.random(times.size) > 0.25]
        stalls[level] = [Stall("app", float(t), 0.25) for t in times]
        train += [level_start(level) + float(t) for t in times]
    one_offs = []
    for level, frac in ((20, 0.5), (40, 0.5)):  # half-way between two train slots
        ph = stalls[level][0].start
        t = ph + (round((LENGTH / 2 - ph) / period) + frac) * period
        stalls[level].append(Stall("db", float(t), 0.3))
        one_offs.append(level_start(level) + float(t))
    req, points = chain_sweep(LEVELS, LENGTH, SERVICE, stalls=stalls, gap=GAP, seed=1)
    doc = analyze(sweep_run(req, points))
    assert_partition(doc)

    (periodic,) = groups_of(doc, "periodic")
    assert periodic["period_s"] == pytest.approx(period, abs=0.02 * period)
    assert periodic["root_tier"] == "app"
    members = set(periodic["episodes"])
    found = [t for t in train if hits(doc, t, 0.25)]
    assert len(found) >= 0.9 * len(train)
    in_train = [t for t in found if hits(doc, t, 0.25) <= members]
    assert len(in_train) >= 0.9 * len(found)
    assert periodic["count"] <= len(train)  # nothing invented
    # the db stalls are one-offs rooted at db, never part of the train
    for t in one_offs:
        eps = hits(doc, t, 0.3)
        assert eps and not eps & members
        (group,) = [g for g in doc["episode_groups"] if eps <= set(g["episodes"])]
        assert (group["kind"], group["root_tier"]) == ("one-off", "db")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_poisson_stalls_are_not_periodic(seed: int) -> None:
    rng = np.random.default_rng(seed)
    stalls = {}
    for level in LEVELS:
        times = np.cumsum(rng.exponential(3.7, 30))
        stalls[level] = [Stall("app", float(t), 0.25) for t in times[times < LENGTH - 1.0]]
    req, points = chain_sweep(LEVELS, LENGTH, SERVICE, stalls=stalls, gap=GAP, seed=seed)
    doc = analyze(sweep_run(req, points))
    assert_partition(doc)
    assert len(doc["episodes"]) > 30
    assert groups_of(doc, "periodic") == []


def test_a_sustained_overload_is_one_saturation_interval() -> None:
    """db (1 ms service) takes 1000 requests/s: levels 4 and 5 ask for more."""
    levels = {1: 300.0, 2: 500.0, 3: 700.0, 4: 1100.0, 5: 1200.0}
    service = {"web": 0.0005, "app": 0.0007, "db": 0.001}
    req, points = chain_sweep(levels, 20.0, service, seed=0)
    doc = analyze(sweep_run(req, points))
    assert_partition(doc)
    (sat,) = groups_of(doc, "saturation")
    assert sat["root_tier"] == "db"
    assert sat["levels"] == [4.0, 5.0]
    assert sat["busy_fraction"] > 0.8
    assert groups_of(doc, "periodic") == []


def test_a_bottleneck_resource_is_one_saturation_interval_per_setup(tmp_path: Path) -> None:
    """The runner-like sweep of test_analyze: open arrivals at 100-600/s, db capacity 400/s in
    s0 and 500/s in s1 (1 / its service time); db cpu is saturated from there on."""
    write_runner_like(tmp_path / "run")
    doc = analyze(read_run(tmp_path / "run"))
    assert_partition(doc)
    for setup, service in RUNNER_SERVICE.items():
        (sat,) = [g for g in groups_of(doc, "saturation") if g["setups"] == [setup]]
        assert (sat["root_tier"], sat["resource"]) == ("db", "cpu")
        assert sat["levels"] == [r for r in RATES if r >= 1.0 / service["db"] - 1e-9]
    assert groups_of(doc, "periodic") == []


def test_the_twin_sweep_stalls_form_one_train(tmp_path: Path) -> None:
    model = load_model(TWIN)
    record_simulated_sweep({"s0": model}, tmp_path / "twin", levels=[100, 200], steady=40)
    run = read_run(tmp_path / "twin")
    doc = analyze(run)
    assert_partition(doc)
    stalls = run.events.filter(pl.col("kind") == "stall")["t_start"].to_numpy()
    gaps = np.diff(stalls)
    truth = float(np.median(gaps))  # the model's period, from the ground-truth events
    (train,) = groups_of(doc, "periodic")
    assert train["root_tier"] == "app"
    assert train["period_s"] == pytest.approx(truth, abs=0.02 * truth)
    assert train["count"] >= 0.9 * stalls.size
    assert train["levels"] == [100.0, 200.0]


def _episodes_at(times: list[float], durations: list[float]) -> list[dict]:
    order = np.argsort(times)
    return [
        {
            "tier": "app",
            "root_tier": "app",
            "resource": "queue",
            "start": times[i],
            "end": times[i] + durations[i],
            "duration": durations[i],
            "kind": "millibottleneck",
            "incident": k,
            "setup": "s0",
            "level": None,
            "vlrt_requests": 0,
        }
        for k, i in enumerate(order)
    ]


SPANS = [(k * 30.0, k * 30.0 + 27.0, "s0", float(k), 0) for k in range(6)]


def test_random_onsets_are_never_a_train() -> None:
    """Poisson onsets from 0.05 to 2 per second, and quasi-regular ones (a dead time plus an
    exponential wait, as a busy tier's episodes come), in six 27 s windows."""
    rng = np.random.default_rng(11)
    for _ in range(100):
        rate = float(np.exp(rng.uniform(np.log(0.05), np.log(2.0))))
        times: list[float] = []
        for a, b, *_ in SPANS:
            times += rng.uniform(a, b, rng.poisson(rate * (b - a))).tolist()
        durations = rng.uniform(0.05, 0.6, len(times)).tolist()
        groups = group_episodes(_episodes_at(times, durations), ["client", "app"], SPANS, 0.05)
        assert all(g["kind"] != "periodic" for g in groups), rate
    for dead, wait in [(0.3, 0.2), (1.0, 0.5), (2.0, 1.0)]:
        for _ in range(30):
            times = []
            for a, b, *_ in SPANS:
                t = a + rng.uniform(0, 2)
                while t < b:
                    times.append(t)
                    t += dead + rng.exponential(wait)
            durations = rng.uniform(0.05, 0.3, len(times)).tolist()
            groups = group_episodes(_episodes_at(times, durations), ["client", "app"], SPANS, 0.05)
            assert all(g["kind"] != "periodic" for g in groups), (dead, wait)


def test_trains_with_misses_jitter_and_noise_keep_their_period() -> None:
    """30 % of the occurrences missed, 20 ms of jitter, unrelated episodes of the same root at
    0.1 per second; periods 1.5-5 s with a random phase per window."""
    rng = np.random.default_rng(3)
    right = 0
    trials = 30
    for _ in range(trials):
        period = float(rng.uniform(1.5, 5.0))
        times: list[float] = []
        for a, b, *_ in SPANS:
            train = np.arange(a + rng.uniform(0, period), b - 0.5, period)
            train = train[rng.random(train.size) > 0.3]
            times += (train + rng.normal(0, 0.02, train.size)).tolist()
            times += rng.uniform(a, b, rng.poisson(0.1 * (b - a))).tolist()
        durations = rng.uniform(0.2, 0.5, len(times)).tolist()
        groups = group_episodes(_episodes_at(times, durations), ["client", "app"], SPANS, 0.05)
        periodic = [g for g in groups if g["kind"] == "periodic"]
        right += len(periodic) == 1 and abs(periodic[0]["period_s"] - period) <= 0.02 * period
    assert right >= 0.9 * trials


def test_imported_requests_keep_their_setup(tmp_path: Path) -> None:
    """Without phases or windows the episodes take their setup from the records' own columns."""
    req = chain_requests(
        20_000, 450.0, SERVICE, stalls=[Stall("db", float(t), 0.3) for t in (10, 20, 30)]
    )
    req.select("tier", "request_id", "start", "end").write_csv(tmp_path / "requests.csv")
    import_csv(tmp_path / "run", requests=tmp_path / "requests.csv")
    doc = analyze(read_run(tmp_path / "run"))
    assert doc["episodes"]
    assert {e["setup"] for e in doc["episodes"]} == {"s0"}
    assert_partition(doc)
