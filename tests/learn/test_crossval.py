"""The cross-validation schemes of seed 000 §2.9: fold counts from combinatorics, and no fold
ever trains on a held-out setup (new-setup), (setup, level) (new-level) or either (both)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierscope.errors import InputError
from tierscope.learn.crossval import check_no_leak, cover, folds, spread


def grid(setups: int, levels: int, windows: int) -> tuple[np.ndarray, np.ndarray]:
    s = np.repeat([f"s{i}" for i in range(setups)], levels * windows)
    lv = np.tile(np.repeat(np.arange(1, levels + 1) * 10.0, windows), setups)
    return s, lv


@pytest.mark.parametrize(
    ("scheme", "expected"),
    [
        ("new-setup", math.comb(6, 2)),  # every pair of setups
        ("new-level", 6 * math.comb(5, 2)),  # every pair of levels of every setup
        ("both", math.comb(6, 2) * 5),  # every pair of setups at every level
    ],
)
def test_fold_counts(scheme: str, expected: int) -> None:
    s, lv = grid(6, 5, 3)
    assert len(folds(s, lv, scheme)) == expected


@pytest.mark.parametrize("scheme", ["new-setup", "new-level", "both"])
def test_no_fold_leaks(scheme: str) -> None:
    s, lv = grid(6, 5, 3)
    for fold in folds(s, lv, scheme):
        check_no_leak(fold, s, lv, scheme)
        # the test rows are exactly what the scheme holds out
        held = set(s[fold.test].tolist())
        if scheme in ("new-setup", "both"):
            assert len(held) == 2
            assert not held & set(s[fold.train].tolist())
        if scheme == "new-level":
            assert len(held) == 1 and len(set(lv[fold.test].tolist())) == 2
        if scheme == "both":
            assert len(set(lv[fold.test].tolist())) == 1
            assert not set(lv[fold.test].tolist()) & set(lv[fold.train].tolist())


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(1, 6)), min_size=12, max_size=80),
    st.sampled_from(["new-setup", "new-level", "both"]),
)
def test_no_leak_on_any_ids(rows: list[tuple[int, int]], scheme: str) -> None:
    s = np.array([f"s{a}" for a, _ in rows])
    lv = np.array([float(b) for _, b in rows])
    try:
        all_folds = folds(s, lv, scheme)
    except InputError:
        return  # too few setups or levels for this scheme: refused, not leaked
    for fold in all_folds:
        check_no_leak(fold, s, lv, scheme)
        assert fold.test.size and fold.train.size


def test_leak_check_catches_a_leak() -> None:
    s, lv = grid(4, 3, 1)
    fold = folds(s, lv, "new-setup")[0]
    leaky = type(fold)(fold.name, np.concatenate([fold.train, fold.test[:1]]), fold.test)
    with pytest.raises(AssertionError):
        check_no_leak(leaky, s, lv, "new-setup")


@pytest.mark.parametrize(("setups", "scheme"), [(2, "new-setup"), (2, "both")])
def test_too_few_setups(setups: int, scheme: str) -> None:
    s, lv = grid(setups, 4, 1)
    with pytest.raises(InputError, match="at least 3 setups"):
        folds(s, lv, scheme)


def test_new_level_needs_three_levels() -> None:
    s, lv = grid(4, 2, 2)
    with pytest.raises(InputError, match="3 load levels"):
        folds(s, lv, "new-level")


def test_spread_is_even_and_bounded() -> None:
    s, lv = grid(8, 2, 1)
    all_folds = folds(s, lv, "new-setup")
    some = spread(all_folds, 7)
    assert len(some) == 7
    assert some[0] is all_folds[0] and some[-1] is all_folds[-1]
    assert spread(all_folds, None) == all_folds


@pytest.mark.parametrize("scheme", ["new-setup", "new-level", "both"])
@pytest.mark.parametrize("setups", [5, 6])
def test_cover_holds_out_every_observation(scheme: str, setups: int) -> None:
    s, lv = grid(setups, 4, 2)
    all_folds = folds(s, lv, scheme)
    chosen = cover(all_folds)
    assert all(any(f is g for g in all_folds) for f in chosen)
    held = np.bincount(np.concatenate([f.test for f in chosen]), minlength=s.size)
    assert held.min() >= 1
    if setups % 2 == 0:  # disjoint pairs of setups (new-setup) / pairs of levels (new-level)
        assert held.max() == 1
    if scheme == "new-setup":
        assert len(chosen) == math.ceil(setups / 2)
