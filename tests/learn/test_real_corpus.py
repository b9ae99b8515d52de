"""Acceptance on a REAL corpus of the embedded three-tier system (issue 8), kept short: 9
setups (each tier capped in three of them), 5 load levels of 3 s. The full-size version (24
setups, 6 levels, every one of the 276 leave-two-setups-out folds) is
``benchmarks/test_bench_learn.py``; its figures are in docs/learning.md.

The tier labels are checked against the planted truth (the tier each setup was built to limit)
before anything is learnt, so the scores below are about the classifier, not the labels."""

from __future__ import annotations

import uuid
from pathlib import Path

import polars as pl
import pytest

from tests.experiment._support import require
from tests.learn.conftest import planted_tiers
from tierscope.experiment.cgroups import CgroupUnavailableError, open_hierarchy
from tierscope.learn import evaluate, load_dataset
from tierscope.learn.corpus import build_corpus
from tierscope.spec.learn import CorpusSpec

pytestmark = [pytest.mark.real_system, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
SETUPS = 9


def short_spec() -> CorpusSpec:
    import yaml

    doc = yaml.safe_load((ROOT / "examples" / "corpus" / "embedded.yaml").read_text())
    doc["experiment"]["sweep"]["levels"] = [5, 15, 30, 55, 80]
    doc["experiment"]["phases"] = {"ramp_up": 1.0, "steady": 3.0, "ramp_down": 0.2}
    return CorpusSpec.model_validate(doc)


@pytest.fixture(scope="module")
def real_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        open_hierarchy(f"tierscope-test-{uuid.uuid4().hex[:6]}").remove()
    except CgroupUnavailableError as exc:
        require("writable cgroups", f"run as root on Linux: {exc}")
    out = tmp_path_factory.mktemp("real") / "corpus"
    build_corpus(short_spec(), SETUPS, out)
    return out


def test_real_corpus_generalises_to_new_setups(real_corpus: Path) -> None:
    data = load_dataset([real_corpus])
    tiers = dict(
        data.ids.with_columns(pl.Series("tier", data.labels["tier"]))
        .group_by("setup").agg(pl.col("tier").first()).iter_rows()
    )  # fmt: skip
    assert tiers == planted_tiers(real_corpus)
    options = {"models": ["random_forest", "gradient_boosting", "logistic_regression"],
               "compare_features": False, "importance_folds": 0}  # fmt: skip
    tier = evaluate(data, _opts(options | {"target": "tier"}))
    sat = evaluate(data, _opts(options))
    sat_best, tier_best = sat["models"][sat["best"]], tier["models"][tier["best"]]
    print(
        f"\nreal corpus, {SETUPS} setups, {tier['folds']} folds: tier {tier_best['accuracy']:.3f}"
        f" (baseline {tier['baseline']:.3f}); saturation {sat_best['accuracy']:.3f} (baseline "
        f"{sat['baseline']:.3f}), major mistakes {sat_best['major_mistake_rate']:.3f}"
    )
    assert tier["folds"] == 36  # every pair of the 9 setups
    assert tier_best["accuracy"] >= 0.95
    assert sat_best["accuracy"] >= 0.85 and sat_best["accuracy"] >= sat["baseline"] + 0.25
    assert sat_best["major_mistake_rate"] <= 0.05


def _opts(d: dict):
    from tierscope.spec.learn import LearnOptions

    return LearnOptions.parse(d)
