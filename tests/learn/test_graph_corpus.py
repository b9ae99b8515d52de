"""Corpora and learning on a call graph (issue 16): setups of examples/graph.yaml's shop, each
with one component capped in turn, simulated by the queueing twin built from the graph (visits
from the calls' probabilities); the analysis labels each setup with the capped component, and
``learn`` finds the limiting component of setups it has not seen, against the majority
baseline."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from tests.learn.conftest import planted_tiers
from tierscope import cli
from tierscope.learn import evaluate, load_dataset
from tierscope.learn.corpus import build_corpus, setup_document, setups, twin_model
from tierscope.spec.experiment import parse_experiment
from tierscope.spec.learn import CorpusSpec, LearnOptions, load_corpus_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "graph.yaml"
CAPPED = ["catalogue-db", "payment", "orders"]


def shop_corpus_spec() -> dict[str, Any]:
    experiment = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    experiment.update(
        sweep={"levels": [5, 10, 20, 35, 55, 80], "repetitions": 1},
        phases={"ramp_up": 1.0, "steady": 4.0, "ramp_down": 0.0},
        faults=[],
    )
    return {"name": "shop", "seed": 5, "experiment": experiment,
            "vary": {"tiers": CAPPED, "capped_cpu": [0.12, 0.25],
                     "capped_cost": [0.0015, 0.003]}}  # fmt: skip


@pytest.fixture(scope="module")
def shop_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("learn") / "shop"
    build_corpus(CorpusSpec.model_validate(shop_corpus_spec()), 12, out, twin=True)
    return out


def test_setups_cap_components_and_the_twin_weighs_them_by_visits() -> None:
    spec = CorpusSpec.model_validate(shop_corpus_spec())
    drawn = setups(spec, 3)
    assert [s["planted_tier"] for s in drawn] == CAPPED
    assert drawn[1]["set"]["system.components.payment.replicas"] == 1
    assert "system.topology" not in drawn[0]["set"]
    doc = copy.deepcopy(spec.experiment)
    doc["system"]["components"]["orders"]["cpu_cost"] = 0.002
    doc["system"]["components"]["orders"]["cpu"] = 0.5
    model = twin_model(doc)
    orders = next(s for s in model.stations if s.name == "orders")
    # orders is visited on 80 % of the requests: (overhead + cost) x 0.8 / quota
    assert model.classes[0].demands["orders"] == pytest.approx(0.8 * 0.0023 / 0.5)
    assert orders.servers == 1


def test_the_labels_are_the_capped_components(shop_corpus: Path) -> None:
    data = load_dataset([shop_corpus])
    got = dict(
        data.ids.with_columns(pl.Series("tier", data.labels["tier"]))
        .group_by("setup")
        .agg(pl.col("tier").unique())
        .iter_rows()
    )
    assert {s: t for s, [t] in got.items()} == planted_tiers(shop_corpus)


def test_the_limiting_component_is_learnt_for_new_setups(shop_corpus: Path) -> None:
    data = load_dataset([shop_corpus])
    doc = evaluate(
        data,
        LearnOptions.parse({"target": "tier", "models": ("random_forest", "logistic_regression"),
                            "max_folds": 15, "compare_features": False}),
    )  # fmt: skip
    assert doc["baseline"] <= 0.5  # three components in turn
    assert doc["models"][doc["best"]]["accuracy"] >= 0.9


def test_a_component_the_experiment_lacks_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = shop_corpus_spec()
    doc["vary"]["tiers"] = ["payment", "app"]
    spec_file = tmp_path / "corpus.yaml"
    spec_file.write_text(yaml.safe_dump(doc))
    assert cli.main(["corpus", str(spec_file), "--out", str(tmp_path / "c"), "--twin"]) == 2
    err = capsys.readouterr().err
    assert "vary.tiers[1]" in err and "'app' is not a component" in err


@pytest.mark.parametrize("path", sorted(EXAMPLE.parent.joinpath("corpus").glob("*.yaml")))
def test_example_corpus_specs_give_valid_experiments(path: Path) -> None:
    spec = load_corpus_spec(path)
    for setup in setups(spec, 6):
        parse_experiment(setup_document(spec, setup, str(path)))
