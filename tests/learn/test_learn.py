"""Learning on data with planted truth: the twin corpus (each setup built to be limited by a
known tier) and a synthetic table with planted labels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.learn.conftest import planted_table, planted_tiers
from tierscope.learn import evaluate, load_dataset
from tierscope.learn.crossval import folds, spread
from tierscope.learn.features import Dataset, from_table
from tierscope.spec.learn import LearnOptions

FAST = ("random_forest", "logistic_regression")


def test_tier_labels_of_the_analysis_are_the_planted_tiers(twin_corpus: Path) -> None:
    data = load_dataset([twin_corpus])
    got = dict(
        data.ids.with_columns(pl.Series("tier", data.labels["tier"]))
        .group_by("setup")
        .agg(pl.col("tier").unique())
        .iter_rows()
    )
    assert {s: t for s, [t] in got.items()} == planted_tiers(twin_corpus)


def test_windows_cut_the_steady_phase(twin_corpus: Path) -> None:
    data = load_dataset([twin_corpus], window_s=1.0)
    per_level = data.ids.group_by("setup", "level").len()["len"]
    assert set(per_level.to_list()) == {4}  # 4 s steady phase, 1 s windows
    for stat in ("mean", "std", "max", "slope"):
        assert f"db.utilization:{stat}" in data.feature_names
    assert "anytier.utilization:mean" in data.feature_names
    assert "client.rt:p95" in data.feature_names


def test_limiting_tier_is_learnt_for_new_setups(twin_corpus: Path) -> None:
    data = load_dataset([twin_corpus])
    doc = evaluate(
        data,
        LearnOptions.parse(
            {"target": "tier", "models": FAST, "max_folds": 15, "compare_features": False}
        ),
    )
    assert doc["models"][doc["best"]]["accuracy"] >= 0.95
    assert doc["baseline"] <= 0.5  # three tiers in turn: the majority class is a third
    assert doc["models"][doc["best"]]["major_mistake_rate"] is None


def test_saturation_is_learnt_for_new_setups(twin_corpus: Path) -> None:
    data = load_dataset([twin_corpus])
    doc = evaluate(
        data, LearnOptions.parse({"models": FAST, "max_folds": 15, "importance_folds": 2})
    )
    best = doc["models"][doc["best"]]
    assert best["accuracy"] >= 0.85 and best["accuracy"] >= doc["baseline"] + 0.3
    assert best["major_mistake_rate"] <= 0.05
    # the pooled confusion matrix holds every prediction of every fold, once
    used = spread(folds(data.setups, data.levels, "new-setup"), 15)
    assert np.array(best["confusion"]["matrix"]).sum() == sum(f.test.size for f in used)
    assert set(doc["feature_sets"]) == {
        "all",
        "recommended",
        "server",
        "resource",
        "latency",
        "waiting",
    }
    # ranked by accuracy drop; empty when no single metric matters (redundant evidence)
    drops = [d["accuracy_drop"] for d in doc["importance"]]
    assert drops == sorted(drops, reverse=True) and (not drops or drops[0] > 0)


def test_planted_table_is_learnt(tmp_path: Path) -> None:
    path = tmp_path / "obs.csv"
    planted_table().write_csv(path)
    data = from_table(path)
    for target in ("saturation", "tier"):
        doc = evaluate(
            data, LearnOptions.parse({"target": target, "models": FAST, "compare_features": False})
        )
        assert doc["models"][doc["best"]]["accuracy"] >= 0.9, (target, doc["models"])
        assert doc["folds"] == doc["folds_total"] == 28  # C(8, 2) pairs of setups


def test_labels_from_throughput_follow_the_saturation_rule(tmp_path: Path) -> None:
    table = planted_table(noise=0.0)
    path = tmp_path / "obs.parquet"
    table.drop("label").write_parquet(path)
    assert from_table(path).labels["saturation"] == table["label"].to_list()


def test_recommended_comes_from_training_setups_only() -> None:
    data = Dataset(
        features=pl.DataFrame({"app.x:mean": [1.0, 2.0, 3.0], "db.y:mean": [1.0, 2.0, 3.0]}),
        ids=pl.DataFrame(
            {
                "setup": ["a", "b", "c"],
                "level": [1.0, 1.0, 1.0],
                "rep": [0, 0, 0],
                "window": [0, 0, 0],
            }
        ),
        labels={"saturation": ["client"] * 3, "tier": [None] * 3},
        categories={
            "a": {"app.x": "reliable", "db.y": "not reliable"},
            "b": {"app.x": "reliable", "db.y": "not reliable"},
            "c": {"app.x": "not reliable", "db.y": "reliable"},
        },
    )
    assert data.recommended(["a", "b"]) == ["app.x:mean"]
    assert data.recommended(["c"]) == ["db.y:mean"]


def test_missing_labels_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "obs.csv"
    planted_table().drop("label", "throughput", "tier").write_csv(path)
    from tierscope.errors import InputError

    with pytest.raises(InputError, match="labels"):
        evaluate(from_table(path), LearnOptions.parse({"models": FAST}))
