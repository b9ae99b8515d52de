"""Acceptance on a REAL corpus of the embedded three-tier system (issue 8), kept short: 9
setups (each tier capped in three of them), 4 load levels of 5 s. The full-size version (24
setups, 6 levels, every one of the 276 leave-two-setups-out folds) is
``benchmarks/test_bench_learn.py``; its figures are in docs/learning.md.

The levels stop at 55 users (1.7-4.5 times the setups' saturation points): deeper in saturation
the capped Python tiers serve up to 15 % more per second than on the plateau before, so the
thesis's rule (server from the first level within 5 % of the peak) labelled plateau levels with
0.2-0.9 s response times ``client`` or ``gray``, and accuracy against those labels fell to 78-79 %
in two runs with a level at 80 users; the same corpora without it scored 89-93 %.

The tier labels are checked against the planted truth (the tier each setup was built to limit)
before anything is learnt, so the scores below are about the classifier, not the labels."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import polars as pl
import pytest
import yaml

from tests.experiment._support import require
from tests.learn.conftest import planted_tiers
from tierscope.experiment.cgroups import CgroupUnavailableError, open_hierarchy
from tierscope.learn import load_dataset
from tierscope.spec.learn import CorpusSpec

pytestmark = [pytest.mark.real_system, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
SETUPS = 9


def short_spec() -> CorpusSpec:
    doc = yaml.safe_load((ROOT / "examples" / "corpus" / "embedded.yaml").read_text())
    doc["experiment"]["sweep"]["levels"] = [5, 15, 30, 55]
    doc["experiment"]["phases"] = {"ramp_up": 1.5, "steady": 5.0, "ramp_down": 0.2}
    return CorpusSpec.model_validate(doc)


@pytest.fixture(scope="module")
def real_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        open_hierarchy(f"tierscope-test-{uuid.uuid4().hex[:6]}").remove()
    except CgroupUnavailableError as exc:
        require("writable cgroups", f"run as root on Linux: {exc}")
    base = tmp_path_factory.mktemp("real")
    spec_file = base / "corpus.yaml"
    spec_file.write_text(yaml.safe_dump(short_spec().model_dump(mode="json", exclude_none=True)))
    out = base / "corpus"
    # Built by the command users run, in a child process (as the learning below).
    done = subprocess.run(
        [sys.executable, "-m", "tierscope.cli", "corpus", str(spec_file), "--setups",
         str(SETUPS), "--out", str(out)],
        capture_output=True, text=True, timeout=840,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_real_corpus_generalises_to_new_setups(real_corpus: Path) -> None:
    data = load_dataset([real_corpus])
    tiers = dict(
        data.ids.with_columns(pl.Series("tier", data.labels["tier"]))
        .group_by("setup").agg(pl.col("tier").first()).iter_rows()
    )  # fmt: skip
    assert tiers == planted_tiers(real_corpus)
    # Learnt in child processes too, through the CLI: after scikit-learn has run in this
    # process, the load generator's 0.2 ms latency checks that follow measured 0.1 ms more.
    tier, sat = (learn_json(real_corpus, target) for target in ("tier", "saturation"))
    sat_best, tier_best = sat["models"][sat["best"]], tier["models"][tier["best"]]
    print(
        f"\nreal corpus, {SETUPS} setups, {tier['folds']} folds: tier {tier_best['accuracy']:.3f}"
        f" (baseline {tier['baseline']:.3f}); saturation {sat_best['accuracy']:.3f} (baseline "
        f"{sat['baseline']:.3f}), major mistakes {sat_best['major_mistake_rate']:.3f}"
    )
    assert tier["folds"] == 36  # every pair of the 9 setups
    assert tier_best["accuracy"] >= 0.95
    # Learnt, not guessed: the majority guess scores the baseline (about 0.5) with a major
    # mistake for every client observation (about 0.44). The quality target (>= 0.90, major
    # mistakes <= 0.03) is the full-size benchmark's: here four levels of 5 s leave the labels
    # of the levels nearest each setup's saturation point to measurement noise (a level within
    # 5 % of the peak or not), and a flipped level is five observations of 180; measured:
    # 0.899 with major mistakes 0.073 on a quiet machine, 0.822 / 0.046 on a busy one.
    assert sat_best["accuracy"] >= max(0.75, sat["baseline"] + 0.25)
    assert sat_best["major_mistake_rate"] <= 0.15


def learn_json(corpus: Path, target: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "tierscope.cli", "learn", str(corpus), "--target", target,
         "--models", "random_forest,gradient_boosting,logistic_regression", "--no-compare",
         "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)
