"""Saturation rules: the thesis's worked example, the monotone labels, M from a +1 node sweep,
Kneedle, intervention analysis and the USL, each against a value known independently."""

from __future__ import annotations

import warnings

import numpy as np
import polars as pl
import pytest

from tierscope.analysis.saturation import (
    analyze_saturation,
    intervention_knee,
    intervention_point,
    kneedle,
    label_levels,
    margin_from_plus_one,
    thresholds,
)
from tierscope.spec.analysis import AnalysisOptions


def test_worked_example_of_the_thesis() -> None:
    # seed 000 L1108: peak 100 req/s, M = 10 % -> Th_0.95 = 95, Th_limit = 85.5
    th95, th_limit = thresholds(100.0, 0.10)
    assert th95 == pytest.approx(95.0)
    assert th_limit == pytest.approx(85.5)
    # values exactly on a threshold belong to the upper zone ([Th_limit, Th_0.95[ is gray)
    assert label_levels([50, 85.5, 90, 95, 100], th95, th_limit) == [
        "client",
        "gray",
        "gray",
        "server",
        "server",
    ]


def test_kafka_setup_0_thresholds() -> None:
    # seed 000 L1358: peak 798 MB/s, M = 7 % -> Th_0.95 = 758, Th_limit = 705 (rounded)
    th95, th_limit = thresholds(798.0, 0.07)
    assert round(th95) == 758
    assert round(th_limit) == 705


def test_labels_are_monotone_after_the_first_server_level() -> None:
    # throughput falling after the peak (Kafka/Spark setup-4 shape) stays server-bound
    th95, th_limit = thresholds(100.0, 0.10)
    labels = label_levels([40, 80, 88, 96, 100, 70, 30], th95, th_limit)
    assert labels == ["client", "client", "gray", "server", "server", "server", "server"]


@pytest.mark.parametrize("seed", range(20))
def test_margin_from_plus_one_puts_the_first_beneficial_level_in_the_gray_zone(seed: int) -> None:
    rng = np.random.default_rng(seed)
    levels = np.arange(1, 13, dtype=float)
    cap = rng.uniform(50, 100)
    base = np.minimum(levels * rng.uniform(8, 12), cap) * (1 + rng.normal(0, 0.003, 12))
    bigger = np.minimum(levels * rng.uniform(8, 12), cap * 1.4)
    plus = np.maximum(base, bigger) * np.where(levels * 10 > 0.8 * cap, 1.05, 1.0)
    th95 = 0.95 * base.max()
    found = margin_from_plus_one(levels, base, plus, th95, gain=0.02)
    assert found is not None
    m, (_lo, _hi), n_star = found
    first = int(np.flatnonzero(plus >= 1.02 * base)[0])
    assert n_star == levels[first]
    labels = label_levels(base, th95, th95 * (1 - m))
    assert labels[first] in ("gray", "server")
    if first > 0 and labels[first] == "gray":
        assert labels[first - 1] == "client"


def test_plus_one_companion_sets_the_margin_in_the_analysis() -> None:
    levels = [1, 2, 3, 4, 5, 6, 7, 8]
    base = [10, 20, 30, 38, 40, 40.5, 40.2, 40.4]
    plus = [10, 20, 30, 40, 48, 52, 55, 56]
    rows = [
        {"setup": "three", "level": lv, "rep": 0, "throughput": x}
        for lv, x in zip(levels, base, strict=True)
    ]
    rows += [
        {"setup": "four", "level": lv, "rep": 0, "throughput": x}
        for lv, x in zip(levels, plus, strict=True)
    ]
    out = {
        s["setup"]: s
        for s in analyze_saturation(
            pl.DataFrame(rows), AnalysisOptions(), companions={"three": "four"}
        )
    }
    three = out["three"]
    assert three["margin_source"].startswith("plus-one:four")
    # level 4 is the first where four nodes give >= 2 % more: it must be gray, level 3 client
    labels = {c["level"]: c["label"] for c in three["curve"]}
    assert labels[4.0] == "gray" and labels[3.0] == "client"
    assert out["four"]["margin"] == pytest.approx(three["margin"])


def test_kneedle_finds_the_corner_of_a_hinge() -> None:
    x = np.arange(1, 21, dtype=float)
    assert kneedle(x, np.minimum(x, 12.0) * 10) == 12.0
    assert kneedle(x, x * 3.0) is None  # a straight line has no knee


def test_kneedle_on_a_saturating_exponential() -> None:
    # y = 1 - exp(-x/5): the difference curve y_n - x_n peaks where dy_n/dx_n = 1; computed here
    # on a fine grid, independently of the implementation's local-maximum rule
    x = np.linspace(0, 50, 501)
    y = 1 - np.exp(-x / 5)
    yn = (y - y.min()) / np.ptp(y)
    xn = (x - x.min()) / np.ptp(x)
    assert kneedle(x, y) == pytest.approx(x[np.argmax(yn - xn)], abs=0.2)


def test_intervention_knee_on_linear_then_flat_throughput() -> None:
    levels = np.arange(10, 160, 10, dtype=float)
    x = np.minimum(levels, 90.0) * 2 + np.random.default_rng(3).normal(0, 1.0, levels.size)
    out = intervention_knee(levels, x)
    assert out["level"] == 100.0  # the first level whose incoming slope is the flat one
    assert out["p_value"] < 1e-6
    assert out["mean_before"] == pytest.approx(2.0, abs=0.2)
    assert out["mean_after"] == pytest.approx(0.0, abs=0.2)


def test_intervention_point_is_the_first_level_where_the_lower_band_drops_below_90() -> None:
    s = [99.0, 100.0, 98.5, 99.5, 97.0, 96.0, 92.0, 85.0, 70.0]
    levels = [2 * (i + 1) for i in range(len(s))]
    expected = None
    for k in range(1, len(s)):  # eq. (10) by hand: mean - 1.96 * sample SD of the prefix
        v = np.array(s[: k + 1])
        if v.mean() - 1.96 * v.std(ddof=1) < 90.0:
            expected = levels[k]
            break
    assert intervention_point(levels, [v / 100 for v in s], 0.90) == expected
    # Table 7 of Malkowski's thesis: 98.39 - 1.96 x 2.37 = 93.75 (the band is mean - 1.96 SD)
    assert pytest.approx(93.75, abs=0.01) == 98.39 - 1.96 * 2.37


def test_usl_fit_recovers_planted_parameters() -> None:
    n = np.arange(1, 41, dtype=float)
    x = 10 * n / (1 + 0.05 * (n - 1) + 0.001 * n * (n - 1))
    points = pl.DataFrame({"setup": "s0", "level": n, "rep": 0, "throughput": x})
    (entry,) = analyze_saturation(points, AnalysisOptions())
    usl = entry["usl"]
    assert usl["sigma"] == pytest.approx(0.05, rel=1e-4)
    assert usl["kappa"] == pytest.approx(0.001, rel=1e-4)
    assert usl["lambda"] == pytest.approx(10.0, rel=1e-4)
    assert entry["peak_level"] == pytest.approx(round(np.sqrt(0.95 / 0.001)), abs=1)


def test_slo_point_and_curve_with_repetitions() -> None:
    rows = []
    for lv, x, rt in [
        (10, 100, 0.1),
        (20, 190, 0.2),
        (30, 260, 0.45),
        (40, 280, 0.9),
        (50, 282, 2.0),
    ]:
        for rep, noise in enumerate((-1.0, 1.0)):
            rows.append(
                {"setup": "s0", "level": lv, "rep": rep, "throughput": x + noise, "rt_p95": rt}
            )
    (entry,) = analyze_saturation(pl.DataFrame(rows), AnalysisOptions(slo_s=0.5))
    assert entry["slo_level"] == 30.0
    point = entry["curve"][0]
    assert point["reps"] == 2 and point["throughput"] == pytest.approx(100.0)
    assert point["throughput_std"] == pytest.approx(np.std([99, 101], ddof=1))
    assert len(entry["labels"]) == 10


def test_intervention_knee_with_equal_slopes_after_the_knee_does_not_warn() -> None:
    # issue 8 regression: slopes past the peak equal up to rounding made scipy's t test warn
    # (precision loss), an error under filterwarnings=error, in the middle of a corpus
    slopes = [2.0, 1.0, 1.5, 3.0, 3.0, 3.0000000000000004]
    throughput = np.concatenate([[0.0], np.cumsum(slopes)]).tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        knee = intervention_knee(list(range(7)), throughput)
    assert knee["level"] == 4.0 and knee["mean_after"] == pytest.approx(3.0)
