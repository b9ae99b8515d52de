"""The workload schema: templates, mixes as Markov chains, merging, and located errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tierscope.errors import SpecError
from tierscope.spec.workload import (
    load_workload,
    merge_workload,
    parse_template,
    parse_workload,
    url_workload,
)

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples" / "workloads").glob("*.yaml"))


def _doc(**extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "interactions": [{"name": "a", "url": "/a"}, {"name": "b", "url": "/b"}],
    }
    doc.update(extra)
    return doc


def _problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        parse_workload(doc, source="w.yaml")
    assert str(info.value).startswith("w.yaml: field '")
    return info.value.errors


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_workloads_are_valid(path: Path) -> None:
    w = load_workload(path)
    assert w.interactions
    pi = w.chain().stationary()
    assert pi.sum() == pytest.approx(1.0)


def test_templates_split_into_parts() -> None:
    assert parse_template("/story?id={int:1:10000}&u={user}") == [
        {"lit": "/story?id="},
        {"int": [1, 10000]},
        {"lit": "&u="},
        "user",
    ]
    assert parse_template('{{"q": "{choice:a|b}"}}') == [
        {"lit": '{"q": "'},
        {"choice": ["a", "b"]},
        {"lit": '"}'},
    ]
    assert parse_template("{session}{request_id}") == ["session", "request_id"]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("/x?{int:1}", "int:LO:HI"),
        ("/x?{int:5:1}", "empty range"),
        ("/x?{nope}", "unknown placeholder"),
        ("/x?{int:1:2", "unclosed"),
        ("/x?a}", "unmatched"),
        ("/x?{choice:}", "non-empty options"),
    ],
)
def test_bad_templates_say_what_is_wrong(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_template(text)


def test_bad_url_template_is_a_located_file_error() -> None:
    doc = _doc()
    doc["interactions"][1]["url"] = "/b?id={int:1:10O}"
    [(loc, msg)] = _problems(doc)
    assert loc == "interactions[1].url"
    assert "int:LO:HI" in msg


def test_mix_with_unknown_names_and_bad_sums() -> None:
    doc = _doc(
        mixes={
            "m": {
                "initial": {"a": 0.5, "c": 0.5},
                "transitions": {"a": {"b": 0.5}, "b": {"stroy": 1.0}},
            }
        }
    )
    locs = [loc for loc, _ in _problems(doc)]
    assert locs == [
        "mixes.m.initial.c",
        "mixes.m.transitions.a",
        "mixes.m.transitions.b.stroy",
    ]


def test_unknown_mix_and_ambiguous_mix() -> None:
    assert _problems(_doc(mixes={"x": {}}, mix="y"))[0][0] == "mix"
    assert "choose one" in _problems(_doc(mixes={"x": {}, "y": {}}))[0][1]


def test_think_time_forms() -> None:
    assert parse_workload(_doc(think_time=2.0)).think_time.native() == {"dist": "exp", "mean": 2.0}
    assert parse_workload(_doc(think_time=0)).think_time.native() is None
    u = parse_workload(_doc(think_time={"dist": "uniform", "low": 1, "high": 3})).think_time
    assert u.mean_s == 2.0
    c = parse_workload(_doc(think_time={"dist": "constant", "mean": 0.5})).think_time
    assert c.native() == {"dist": "det", "mean": 0.5}
    [(loc, msg)] = _problems(_doc(think_time={"dist": "exp", "low": 1}))
    assert loc == "think_time" and "needs mean" in msg
    [(loc, msg)] = _problems(_doc(think_time={"dist": "exp", "mean": 1, "high": 3}))
    assert "takes no high" in msg
    assert _problems(_doc(think_time={"dist": "gamma", "mean": 1}))[0][0] == "think_time.dist"


def test_negative_rate_and_bad_mode_are_located() -> None:
    assert _problems(_doc(mode="open", rate=-5))[0][0] == "rate"
    assert _problems(_doc(mode="half-open"))[0][0] == "mode"


def test_reserved_and_duplicate_names() -> None:
    doc = _doc()
    doc["interactions"].append({"name": "a", "url": "/c"})
    assert _problems(doc)[0] == ("interactions[2].name", "duplicate interaction 'a'")
    doc = _doc()
    doc["interactions"][0]["name"] = "end"
    assert _problems(doc)[0][0] == "interactions[0].name"


def test_headers_the_generator_owns_are_refused() -> None:
    doc = _doc()
    doc["interactions"][0]["headers"] = {"X-Request-Id": "mine"}
    assert "set by the generator" in _problems(doc)[0][1]


def test_partly_open_sessions_must_end() -> None:
    (_, msg) = _problems(_doc(mode="partly-open"))[0]
    assert "must end" in msg
    w = parse_workload(_doc(mode="partly-open", mixes={"m": {"end_probability": 0.25}}))
    assert w.chain().mean_session_requests() == pytest.approx(4.0)


def test_stationary_mix_of_a_known_chain() -> None:
    # P = [[0, 1, 0], [0.5, 0, 0.5], [1, 0, 0]] has stationary (0.4, 0.4, 0.2) (solve by hand:
    # pi_b = pi_a, pi_c = pi_b / 2, pi_a = pi_b / 2 + pi_c).
    doc = {
        "interactions": [{"name": n, "url": f"/{n}"} for n in "abc"],
        "mixes": {
            "m": {
                "initial": {"a": 1},
                "transitions": {"a": {"b": 1}, "b": {"a": 0.5, "c": 0.5}, "c": {"a": 1}},
            }
        },
    }
    np.testing.assert_allclose(parse_workload(doc).chain().stationary(), [0.4, 0.4, 0.2])


def test_stationary_mix_with_session_restarts() -> None:
    # Sessions a -> b -> (end w.p. 1): every session is exactly "a, b", so the mix is 1/2, 1/2
    # even though the rows alone would loop on b.
    doc = {
        "interactions": [{"name": n, "url": f"/{n}"} for n in "ab"],
        "mixes": {"m": {"initial": {"a": 1}, "transitions": {"a": {"b": 1}, "b": {"end": 1}}}},
    }
    chain = parse_workload(doc).chain()
    np.testing.assert_allclose(chain.stationary(), [0.5, 0.5])
    assert chain.mean_session_requests() == pytest.approx(2.0)


def test_weights_without_mixes_are_independent_draws() -> None:
    doc = _doc()
    doc["interactions"][0]["weight"] = 3
    chain = parse_workload(doc).chain()
    np.testing.assert_allclose(chain.stationary(), [0.75, 0.25])
    np.testing.assert_allclose(chain.transitions, [[0.75, 0.25], [0.75, 0.25]])


def test_merge_replaces_distributions_and_lists() -> None:
    base = _doc(
        think_time={"dist": "uniform", "low": 1, "high": 3}, mixes={"m": {"initial": {"a": 1}}}
    )
    merged = merge_workload(
        base, {"think_time": {"dist": "exp", "mean": 0.5}, "mixes": {"m": {"end_probability": 0.1}}}
    )
    assert merged["think_time"] == {"dist": "exp", "mean": 0.5}
    assert merged["mixes"]["m"] == {"initial": {"a": 1}, "end_probability": 0.1}
    assert base["think_time"]["dist"] == "uniform"  # unchanged
    parse_workload(merged)


def test_url_workload_is_one_interaction() -> None:
    w = url_workload("http://127.0.0.1:8080/index.html")
    assert [i.url for i in w.interactions] == ["http://127.0.0.1:8080/index.html"]
    assert w.mode == "closed"
