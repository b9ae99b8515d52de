"""Markov session workloads reproduce their chain; partly-open sessions arrive and end as set.

Truths are computed by hand from small chains (not by the code under test).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tests.load.conftest import run, workload
from tierscope.load import TestServer

THREE = [{"name": n, "url": f"/{n}"} for n in ("a", "b", "c")]


def test_closed_sessions_reproduce_the_stationary_mix(server: TestServer) -> None:
    # Rows: a -> b; b -> a or c (1/2 each); c -> a. After each request the session ends with
    # probability 0.1 and the user starts a new one at a, so the chain is P' = 0.9 P + 0.1·e_a.
    # By hand: pi_b = 0.9 pi_a, pi_c = 0.45 pi_b, and they sum to 1, so
    # pi_a = 1 / (1 + 0.9 + 0.405).
    pi_a = 1 / (1 + 0.9 + 0.405)
    pi = np.array([pi_a, 0.9 * pi_a, 0.405 * pi_a])
    mixes = {
        "m": {
            "initial": {"a": 1},
            "transitions": {"a": {"b": 1}, "b": {"a": 0.5, "c": 0.5}, "c": {"a": 1}},
            "end_probability": 0.1,
        }
    }
    users = 60
    result = run(server, workload(interactions=THREE, mixes=mixes), users, 3.0)
    df = result.requests
    assert df.height > 20_000
    # Users are independent: the spread of per-user mixes gives the sampling error.
    per_user = (
        df.group_by("user")
        .agg(*(pl.col("interaction").eq(n).mean().alias(n) for n in "abc"))
        .select("a", "b", "c")
        .to_numpy()
    )
    mean = per_user.mean(axis=0)
    se = per_user.std(axis=0, ddof=1) / np.sqrt(users)
    assert np.all(np.abs(mean - pi) < 4 * se + 1e-3), (mean, pi, se)
    # Within a session the transitions follow the rows.
    seq = df.sort("session", "intended_start").with_columns(
        pl.col("interaction").shift(-1).over("session").alias("next")
    )
    after_b = seq.filter((pl.col("interaction") == "b") & pl.col("next").is_not_null())
    frac_a = (after_b["next"] == "a").mean()
    assert frac_a == pytest.approx(0.5, abs=4 * np.sqrt(0.25 / after_b.height))
    assert set(seq.filter(pl.col("interaction") == "a")["next"].drop_nulls()) == {"b"}


def test_session_lengths_are_geometric(server: TestServer) -> None:
    mixes = {"m": {"end_probability": 0.25}}
    result = run(server, workload(interactions=THREE, mixes=mixes), 20, 2.0)
    # Sessions cut by the end of the run are shorter; drop the last session of each user.
    last = result.requests.group_by("user").agg(pl.col("session").max())["session"]
    complete = result.requests.filter(~pl.col("session").is_in(last.implode()))
    lengths = complete.group_by("session").len()["len"].to_numpy()
    assert lengths.mean() == pytest.approx(4.0, abs=4 * np.sqrt(12 / lengths.size))


def test_partly_open_sessions_arrive_as_poisson_and_end(server: TestServer) -> None:
    server.set_delay(0.002)
    rate, duration = 40.0, 4.0
    w = workload(
        mode="partly-open",
        interactions=THREE,
        think_time={"dist": "exp", "mean": 0.02},
        mixes={"m": {"initial": {"a": 1}, "end_probability": 0.2}},
    )
    result = run(server, w, rate, duration)
    s = result.summary
    started = s["sessions"]["started"]
    assert abs(started - rate * duration) < 4 * np.sqrt(rate * duration)
    firsts = result.requests.sort("intended_start").group_by("session").first()
    assert set(firsts["interaction"]) == {"a"}
    # Requests per session: geometric with mean 1 / 0.2 (sessions that ran into the end of the
    # run are dropped).
    done = result.requests.filter(pl.col("intended_start") < s["steady"]["end"] - 1.0)
    per = done.group_by("session").len()["len"].to_numpy()
    assert per.mean() == pytest.approx(5.0, abs=4 * np.sqrt(20 / per.size))
    # Each session is its own user slot; slots are reused, sessions never are.
    assert result.requests["session"].n_unique() == firsts.height
