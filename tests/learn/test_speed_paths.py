"""The shortcuts that make ``learn`` fast give the answers of the slow, obvious ways: the five
models fitted on one shared imputed/scaled copy of a fold predict what their pipelines predict,
importance on batched copies equals shuffling one copy at a time, the feature sets are scored
the same whether a set's fits are reused from the main cross-validation or made anew, worker
processes give the document of this process, and categories read from a saved analysis are
those computed anew; and the progress of every stage reaches the CLI's bars."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.learn.conftest import TWIN_SPEC, planted_table
from tierscope.learn import evaluate, load_dataset, models, scores
from tierscope.learn import features as features_module
from tierscope.learn.corpus import build_corpus
from tierscope.learn.crossval import folds
from tierscope.learn.evaluate import STAGES
from tierscope.learn.features import INDICATOR_P, Dataset, from_run, from_table
from tierscope.progress import reporting
from tierscope.spec.analysis import AnalysisOptions
from tierscope.spec.learn import MODEL_NAMES, CorpusSpec, LearnOptions

FAST = ("random_forest", "logistic_regression")


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    path = tmp_path_factory.mktemp("speed") / "obs.csv"
    planted_table(setups=6).write_csv(path)
    return from_table(path)


def _xy(data: Dataset) -> tuple[np.ndarray, np.ndarray]:
    X = data.features.drop("throughput").to_numpy().astype(float)
    return X, np.asarray(data.labels["saturation"], dtype=object)


@pytest.mark.parametrize("holes", [False, True])
def test_shared_preprocessing_predicts_as_the_pipelines(table: Dataset, holes: bool) -> None:
    X, y = _xy(table)
    if holes:  # gauges missing in some windows: the imputer has work to do
        X = X.copy()
        X[np.random.default_rng(1).random(X.shape) < 0.1] = np.nan
    for fold in folds(table.setups, table.levels, "new-setup")[::4]:
        Xtr, Xte = X[fold.train], X[fold.test]
        together = models.fit_predict(MODEL_NAMES, Xtr, y[fold.train], Xte, seed=3)
        for name in MODEL_NAMES:
            alone = models.make(name, 3).fit(Xtr, y[fold.train]).predict(Xte)
            assert np.array_equal(together[name], alone), (name, fold.name)


def test_one_class_fold_predicts_that_class() -> None:
    X = np.arange(12.0).reshape(6, 2)
    got = models.fit_predict(MODEL_NAMES, X[:4], np.array(["gray"] * 4), X[4:])
    assert all(p.tolist() == ["gray", "gray"] for p in got.values())


def test_batched_importance_equals_shuffling_one_copy_at_a_time(
    table: Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    X, y = _xy(table)
    fold = folds(table.setups, table.levels, "new-setup")[0]
    model = models.fit("decision_tree", X[fold.train], y[fold.train])
    Xte, yte = X[fold.test], y[fold.test]
    groups = {"a": [0, 1], "b": [2], "c": [3, 4, 5]}
    # the obvious way: one shuffled copy, one prediction, in the same random order
    rng = np.random.default_rng(7)
    base = np.mean(model.predict(Xte) == yte)
    expected = {}
    for name, cols in groups.items():
        drops = []
        for _ in range(3):
            shuffled = Xte.copy()
            shuffled[:, cols] = Xte[rng.permutation(len(Xte))][:, cols]
            drops.append(base - np.mean(model.predict(shuffled) == yte))
        expected[name] = float(np.mean(drops))
    monkeypatch.setattr(scores, "BATCH_ROWS", 2 * len(Xte))  # several calls, a short last one
    got = scores.grouped_permutation_importance(model.predict, Xte, yte, groups, seed=7)
    assert got == pytest.approx(expected, abs=1e-12)
    assert any(v > 0 for v in got.values())  # the shuffles did change predictions


def test_feature_sets_scored_alike_whether_reused_or_refitted(table: Dataset) -> None:
    base = {"models": ("logistic_regression",), "importance_folds": 0}
    reused_all = evaluate(table, LearnOptions(features="all", **base))["feature_sets"]
    reused_waiting = evaluate(table, LearnOptions(features="waiting", **base))["feature_sets"]
    assert reused_all == reused_waiting
    assert reused_all["all"]["folds"] == 3  # the 3 disjoint pairs of 6 setups


def test_workers_give_the_same_document(table: Dataset) -> None:
    options = {"models": FAST, "importance_folds": 2}
    here = evaluate(table, LearnOptions(jobs=1, **options))
    there = evaluate(table, LearnOptions(jobs=2, **options))
    assert here == there


def test_progress_reports_every_stage_to_its_end(table: Dataset) -> None:
    calls: list[tuple[str, float, float]] = []
    with reporting(lambda *a: calls.append(a)):  # the CLI's progress bars, without a callback
        evaluate(table, LearnOptions(models=FAST))
    assert [c[0] for c in calls if c[1] == 0] == list(STAGES)
    for stage in STAGES:
        done = [d for s, d, _ in calls if s == stage]
        totals = {t for s, _, t in calls if s == stage}
        assert len(totals) == 1 and done == list(range(int(totals.pop()) + 1))
    assert {t for s, _, t in calls if s == STAGES[0]} == {15}  # C(6, 2) folds


def test_corpus_reports_each_setup(tmp_path: Path) -> None:
    calls: list[tuple[str, int, int]] = []
    spec = CorpusSpec.model_validate(TWIN_SPEC)
    build_corpus(spec, 2, tmp_path / "c", twin=True, progress=lambda *a: calls.append(a))
    assert calls == [("simulating setups", d, 2) for d in range(3)]


def test_categories_from_the_saved_analysis_are_those_computed(
    twin_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tierscope.analysis import analyze
    from tierscope.store import read_run, write_analysis

    run = tmp_path / "run"
    shutil.copytree(twin_corpus / "setup-002", run)
    write_analysis(run, analyze(read_run(run), AnalysisOptions(change_p=INDICATOR_P)))
    computed: list[Any] = []
    real = features_module.indicator_analysis.analyze_indicators
    monkeypatch.setattr(
        features_module.indicator_analysis,
        "analyze_indicators",
        lambda *a, **k: computed.append(1) or real(*a, **k),
    )
    saved = from_run(run, 1.0)
    assert not computed  # read, not computed
    doc = json.loads((run / "analysis.json").read_text())
    doc["options"]["change_p"] = 0.01
    (run / "analysis.json").write_text(json.dumps(doc))
    fresh = from_run(run, 1.0)
    assert computed  # the saved analysis used another significance: computed anew
    assert saved.categories == fresh.categories
    assert sum(len(v) for v in saved.categories.values()) > 10


def test_reading_runs_in_workers_gives_the_same_data(twin_corpus: Path, tmp_path: Path) -> None:
    saved = load_dataset([twin_corpus], jobs=1)
    corpus = tmp_path / "corpus"
    shutil.copytree(twin_corpus, corpus)
    for path in corpus.glob("*/analysis.json"):  # analysed at another significance: the
        doc = json.loads(path.read_text())  # categories are computed, in the workers
        doc["options"]["change_p"] = 0.01
        path.write_text(json.dumps(doc))
    calls: list[tuple[str, int, int]] = []
    there = load_dataset([corpus], jobs=2, progress=lambda *a: calls.append(a))
    here = load_dataset([corpus], jobs=1)
    for other in (here, there):
        assert saved.features.equals(other.features) and saved.ids.equals(other.ids)
        assert saved.labels == other.labels and saved.categories == other.categories
    assert [c[1] for c in calls] == list(range(13)) and {c[2] for c in calls} == {12}
