"""``tierscope corpus``, ``learn`` and ``classify``: one JSON document with --json in the issue's
contract, a saved model that classifies fresh metrics (run folder or CSV window) back to the
planted answer, and exit status 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import yaml

from tests.learn.conftest import TWIN_SPEC, planted_table
from tierscope.cli import main
from tierscope.learn.corpus import build_corpus
from tierscope.spec.learn import CorpusSpec, LearnDocument

FAST = "random_forest,logistic_regression"


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)  # exactly one document on stdout


@pytest.fixture(scope="module")
def model_file(twin_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "twin.model"
    assert (
        main(
            [
                "learn",
                str(twin_corpus),
                "--models",
                FAST,
                "--max-folds",
                "6",
                "--no-compare",
                "--save",
                str(path),
                "--json",
            ]
        )
        == 0
    )
    return path


@pytest.fixture(scope="module")
def fresh_db_setup(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A setup the model never saw (another seed), built to be limited by db."""
    spec = CorpusSpec.model_validate(TWIN_SPEC | {"seed": 99, "vary": {"tiers": ["db"]}})
    out = tmp_path_factory.mktemp("fresh") / "corpus"
    build_corpus(spec, 1, out, twin=True)
    return out / "setup-000"


def test_learn_json_contract(twin_corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(
        ["learn", str(twin_corpus), "--models", FAST, "--max-folds", "4", "--no-compare", "--json"],
        capsys,
    )
    LearnDocument.model_validate(doc)
    assert doc["scheme"] == "new-setup" and doc["target"] == "saturation"
    assert 0 < doc["baseline"] < 1 and doc["best"] in doc["models"]
    for m in ("random_forest", "logistic_regression"):
        assert set(doc["models"][m]) >= {"accuracy", "balanced_accuracy", "major_mistake_rate"}
    assert doc["folds"] == 4 and doc["folds_total"] == 66  # C(12, 2)


def test_corpus_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "corpus.yaml"
    spec.write_text(yaml.safe_dump(TWIN_SPEC))
    out = tmp_path / "c"
    doc = run_json(
        ["corpus", str(spec), "--setups", "3", "--out", str(out), "--twin", "--json"], capsys
    )
    assert doc["setups"] == 3 and doc["run"] == 3
    assert doc["planted_tiers"] == {"app": 1, "db": 1, "web": 1}
    again = run_json(
        ["corpus", str(spec), "--setups", "3", "--out", str(out), "--twin", "--json"], capsys
    )
    assert again["run"] == 0  # complete setups are kept, not run again


def test_classify_round_trip_run_folder(
    model_file: Path, fresh_db_setup: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the run's last window is at 80 users, far beyond the db's capacity
    doc = run_json(["classify", str(model_file), str(fresh_db_setup), "--json"], capsys)
    assert doc["saturation"]["class"] == "server"
    assert doc["tier"]["class"] == "db"
    assert sum(doc["tier"]["probabilities"].values()) == pytest.approx(1.0)
    assert doc["missing_features"] == 0


def test_classify_round_trip_csv_window(
    model_file: Path, fresh_db_setup: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = pl.read_parquet(fresh_db_setup / "metrics.parquet")
    # a window at 10 users: well below saturation (client), with the db busy enough to name it
    # (at 5 users its utilisation barely stands out and the forest's answer is a toss-up)
    low = metrics.filter(pl.col("level") == 10.0)
    t_end = low["t"].max()
    window = low.filter(pl.col("t") > t_end - 1.0).select("t", "tier", "node", "metric", "value")
    long_csv = tmp_path / "long.csv"
    window.write_csv(long_csv)
    wide_csv = tmp_path / "wide.csv"
    (
        window.group_by("t", "tier", "metric")
        .agg(pl.col("value").mean())
        .with_columns(pl.concat_str("tier", pl.lit("."), "metric").alias("name"))
        .pivot(on="name", index="t", values="value")
        .sort("t")
        .write_csv(wide_csv)
    )
    a = run_json(["classify", str(model_file), str(long_csv), "--json"], capsys)
    b = run_json(["classify", str(model_file), str(wide_csv), "--json"], capsys)
    assert a["saturation"]["class"] == b["saturation"]["class"] == "client"
    assert a["tier"]["class"] == "db"
    assert a["saturation"]["probabilities"] == pytest.approx(b["saturation"]["probabilities"])


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "obs.csv"
    planted_table(setups=4).write_csv(path)
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--features", "bogus"], "features"),
        (["--scheme", "sideways"], "scheme"),
        (["--models", "deep_net"], "models"),
        (["--target", "latency"], "target"),
        (["--window", "0"], "window_s"),
        (["--jobs", "0"], "jobs"),
    ],
)
def test_learn_bad_options_exit_2(
    table: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["learn", str(table), *args]) == 2
    assert message in capsys.readouterr().err


def test_too_few_setups_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "two.csv"
    planted_table(setups=2).write_csv(path)
    assert main(["learn", str(path)]) == 2
    assert "at least 3 setups" in capsys.readouterr().err
    assert (
        main(
            [
                "learn",
                str(path),
                "--scheme",
                "new-level",
                "--models",
                "decision_tree",
                "--no-compare",
                "--json",
            ]
        )
        == 0
    )  # two setups are enough for new levels


@pytest.mark.parametrize(
    ("drop", "target"), [(("label", "throughput"), "saturation"), (("tier",), "tier")]
)
def test_missing_labels_exit_2(
    tmp_path: Path, drop: tuple[str, ...], target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nolabels.csv"
    planted_table(setups=4).drop(*drop).write_csv(path)
    assert main(["learn", str(path), "--target", target]) == 2
    assert "labels" in capsys.readouterr().err


def test_empty_feature_set_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "obs.csv"
    planted_table(setups=4).write_csv(path)  # utilisation and queue: no latency metric
    assert main(["learn", str(path), "--features", "latency"]) == 2
    assert "latency" in capsys.readouterr().err


def test_classify_bad_inputs_exit_2(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.model"
    junk.write_text("not a model")
    other = tmp_path / "other.csv"
    pl.DataFrame({"t": [0.0, 0.5, 1.0, 1.5], "kafka.lag": [1.0, 2.0, 3.0, 4.0]}).write_csv(other)
    assert main(["classify", str(junk), str(other)]) == 2
    assert main(["classify", str(model_file), str(other)]) == 2
    assert "missing" in capsys.readouterr().err
    assert main(["classify", str(model_file), str(tmp_path / "nowhere.csv")]) == 2
    assert main(["learn", str(tmp_path / "nowhere")]) == 2


def test_report_gains_learned_indicators(
    model_file: Path, fresh_db_setup: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(fresh_db_setup), "--model", str(model_file), "--out", str(out)]) == 0
    page = out.read_text()
    section = page[page.index("<h2>Learned indicators</h2>") :]
    assert "setups it never saw" in section and "accuracy drop" in section
    # one row per level of the run, with the model's answer for both targets
    assert section.count("<tr><td>s0</td>") == 6
    assert "server (100% of windows)" in section and "db (100% of windows)" in section
