"""The loss/duplication predictor and Algorithm 1 on data from a planted reliability law (the
measured corpus comes with the Kafka target): the predictor must beat the constant baseline on
configurations it never saw, and the step search must reach a reachable KPI target."""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest

from tierscope.domains.kafka import kpi
from tierscope.domains.kafka_reliability import (
    aggregate_rates,
    cross_validate,
    dynamic_configuration,
    fit_reliability,
)
from tierscope.errors import InputError


def planted(
    loss: float, delay_ms: float, acks: str, batch: int, timeout_ms: float
) -> tuple[float, float]:
    """A law shaped like the thesis's findings: loss climbs past ~8 % packet loss, acks=0 loses
    most, batching helps, a timeout below a few round trips loses everything late; duplicates
    only with acks >= 1, growing with loss and shrinking with batching."""
    tcp = 1 / (1 + np.exp(-(loss - 0.10) * 60))
    base = {"0": 0.9, "1": 0.45, "all": 0.3}[acks] * tcp / batch**0.5
    late = 1.0 if timeout_ms < 4 * delay_ms else 0.0
    p_l = min(1.0, base + late * (1 - base))
    p_d = 0.0 if acks == "0" else 0.05 * loss / batch
    return p_l, p_d


@pytest.fixture(scope="module")
def rows() -> pl.DataFrame:
    rng = np.random.default_rng(4)
    out = []
    settings = itertools.product(["0", "1", "all"], [1, 2, 5, 10], [200, 1000, 3000])
    for acks, batch, timeout in settings:
        for loss, delay in itertools.product([0.0, 0.08, 0.12, 0.2], [10, 100]):
            p_l, p_d = planted(loss, delay, acks, batch, timeout)
            n = 20_000
            lost, dup = rng.binomial(n, p_l), rng.binomial(n, p_d)
            out.append({"acks": acks, "batch_messages": batch, "timeout_ms": timeout,
                        "message_size": 200, "loss": loss, "delay_ms": delay,
                        "loss_rate": lost / n, "duplicate_rate": dup / n})  # fmt: skip
    return pl.DataFrame(out)


@pytest.mark.parametrize("method", ["gbm", "mlp"])
def test_the_predictor_beats_the_baseline_on_unseen_configurations(
    rows: pl.DataFrame, method: str
) -> None:
    # (the thesis's four layers are the default; a smaller network keeps the test quick)
    cv = cross_validate(rows, method=method, folds=4, layers=(32, 16))
    assert cv["configurations"] == 36 and cv["folds"] == 4
    assert cv["loss_rate_mae"] < 0.5 * cv["loss_rate_baseline"], cv
    assert cv["duplicate_rate_mae"] < cv["duplicate_rate_baseline"], cv


def test_predictions_follow_the_planted_law(rows: pl.DataFrame) -> None:
    model = fit_reliability(rows)
    probe = pl.DataFrame({"acks": ["0", "all"], "batch_messages": [1, 10],
                          "timeout_ms": [3000] * 2, "message_size": [200] * 2,
                          "loss": [0.2, 0.2], "delay_ms": [10, 10]})  # fmt: skip
    got = model.predict(probe)
    assert got["loss_rate"][0] > 0.6 > 0.2 > got["loss_rate"][1]
    with pytest.raises(InputError, match="acks"):
        model.predict(probe.with_columns(pl.Series("acks", ["2", "x"])))


def test_algorithm_one_steps_to_the_target_and_stops_when_nothing_helps() -> None:
    """Network at 15 % loss, 100 ms: from acks=0, batch 1 the planted law loses a lot; the
    step search moves acks, then the batch size, until γ meets the target (the best γ this
    law allows is 0.78: a target of 0.999 leaves the search at the best it found)."""

    def predict(c: dict) -> tuple[float, float, float, float]:
        p_l, p_d = planted(0.15, 100, c["acks"], c["batch_messages"], c["timeout_ms"])
        service = 1.0 - 0.02 * c["batch_messages"]  # batching costs a little service rate
        return 0.5, service, p_l, p_d

    candidates = {"acks": ["0", "1", "all"], "batch_messages": [1, 2, 5, 10],
                  "timeout_ms": [200, 1000, 3000]}  # fmt: skip
    start = {"acks": "0", "batch_messages": 1, "timeout_ms": 3000}
    config, steps = dynamic_configuration(start, candidates, predict, target=0.77)
    assert kpi(*predict(config)) >= 0.77 and steps[-1].gamma >= 0.77
    assert steps[0].parameter == "acks" and config["acks"] != "0"
    assert {s.parameter for s in steps} == {"acks", "batch_messages"}
    unreachable, steps2 = dynamic_configuration(start, candidates, predict, target=0.999)
    assert kpi(*predict(unreachable)) == max(s.gamma for s in steps2)  # the best it could do
    with pytest.raises(InputError):
        dynamic_configuration(start | {"acks": "2"}, candidates, predict, target=0.8)


def test_aggregate_rates_weigh_by_the_message_rate() -> None:
    # half the time at 1000 msg/s with 10 % loss, half at 3000 msg/s with none
    r = aggregate_rates([0, 1, 1.000001, 2], [1000, 1000, 3000, 3000], [0.1, 0.1, 0, 0], [0] * 4)
    assert r["loss"] == pytest.approx(100 / 4000, rel=1e-3)


def test_kafka_learn_reads_the_reliability_document_and_csv(
    rows: pl.DataFrame, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tierscope kafka learn` on what `kafka reliability --json` writes (acks as numbers and
    "all", a poll interval never set, nested error counts) and on the same rows as CSV."""
    import json

    from tierscope.cli import main

    doc = {"messages": 20_000, "rate": 2000, "rows": [
        {**r, "acks": int(r["acks"]) if r["acks"] != "all" else "all", "poll_ms": None,
         "errors": {"msg_timed_out": 3}} for r in rows.iter_rows(named=True)]}  # fmt: skip
    (tmp_path / "rows.json").write_text(json.dumps(doc))
    rows.write_csv(tmp_path / "rows.csv")
    for name in ("rows.json", "rows.csv"):
        assert main(["kafka", "learn", str(tmp_path / name), "--folds", "4", "--json"]) == 0
        cv = json.loads(capsys.readouterr().out)
        assert cv["configurations"] == 36 and cv["rows"] == rows.height
        assert cv["loss_rate_mae"] < 0.5 * cv["loss_rate_baseline"], cv
    (tmp_path / "bad.json").write_text('{"rows": 3}')
    assert main(["kafka", "learn", str(tmp_path / "bad.json")]) == 2
    assert "rows" in capsys.readouterr().err


def test_kpi_terms_are_learned_when_the_rows_have_them(rows: pl.DataFrame) -> None:
    """Rows from `kafka reliability` also carry the KPI's relative payload and service ratio:
    the predictor learns them too (rows without them, above, learn only the rates)."""
    with_terms = rows.with_columns(
        (200 * pl.col("batch_messages") / (200 * pl.col("batch_messages") + 130)).alias(
            "relative_payload"
        ),
        (1 - pl.col("loss_rate")).alias("service_ratio"),
    )
    cv = cross_validate(with_terms, folds=4)
    assert cv["relative_payload_mae"] < 0.2 * cv["relative_payload_baseline"], cv
    assert cv["service_ratio_mae"] < 0.5 * cv["service_ratio_baseline"], cv
    model = fit_reliability(with_terms)
    assert set(model.targets) == {"loss_rate", "duplicate_rate", "relative_payload",
                                  "service_ratio"}  # fmt: skip
    # a term undefined in some rows (nothing acknowledged: no late share) is learned from the
    # others, and scored on the others
    late = with_terms.with_columns(
        pl.when(pl.col("loss") >= 0.2).then(None).otherwise(pl.col("batch_messages") / 20)
        .alias("late_rate"))  # fmt: skip
    assert "late_rate" in fit_reliability(late).targets
    cv = cross_validate(late, folds=4)
    assert cv["late_rate_mae"] < 0.5 * cv["late_rate_baseline"], cv
    assert "relative_payload_mae" not in cross_validate(rows, folds=4)
