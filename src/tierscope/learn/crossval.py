"""Cross-validation schemes of seed 000 §2.9, as lists of (train rows, test rows).

* ``new-setup``: leave two setups out, over every pair of setups (C(n, 2) folds): train on all
  observations of the other setups, test on every observation of the two.
* ``new-level``: for each setup (with 3 levels or more) and each pair of its load levels, test
  on that setup's observations at the two levels and train on everything else, i.e. the setup
  at its other levels and all other setups (the variant that fits "deployment decided early,
  load changes").
* ``both``: for each pair of setups {a, b} and each load level c of theirs, test on a and b at c
  and train on the other setups at their levels other than c: the training set holds neither
  the setups nor the number of clients (the thesis's wording, L2492, with p = 2 setups).

Design decision: a fold is a pair of index arrays computed from the ids alone, never from
features or labels, so :func:`check_no_leak` can prove on any data set that no held-out setup
(new-setup), no held-out (setup, level) (new-level) and neither (both) reaches training.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from tierscope.errors import InputError

MIN_SETUPS = {"new-setup": 3, "both": 3, "new-level": 1}


@dataclass(frozen=True)
class Fold:
    name: str
    train: np.ndarray
    test: np.ndarray


def folds(setups: np.ndarray, levels: np.ndarray, scheme: str) -> list[Fold]:
    """Every fold of ``scheme`` over rows with these setup and level ids."""
    setups = np.asarray(setups).astype(str)
    levels = np.asarray(levels, dtype=float)
    names = sorted(set(setups.tolist()))
    if scheme not in MIN_SETUPS:
        raise InputError("--scheme", scheme, "new-setup, new-level or both")
    if len(names) < MIN_SETUPS[scheme]:
        raise InputError(
            "--scheme",
            scheme,
            f"at least {MIN_SETUPS[scheme]} setups (two held out, one or more to train); "
            f"the data has {len(names)}",
        )
    out: list[Fold] = []
    rows = np.arange(setups.size)
    if scheme == "new-setup":
        for a, b in itertools.combinations(names, 2):
            test = (setups == a) | (setups == b)
            out.append(Fold(f"{a}+{b}", rows[~test], rows[test]))
    elif scheme == "new-level":
        for s in names:
            own = setups == s
            own_levels = sorted(set(levels[own].tolist()))
            if len(own_levels) < 3:  # the setup must stay in training at some level
                continue
            for la, lb in itertools.combinations(own_levels, 2):
                test = own & ((levels == la) | (levels == lb))
                out.append(Fold(f"{s}@{la:g}+{lb:g}", rows[~test], rows[test]))
        if not out:
            raise InputError(
                "--scheme", scheme, "a setup with at least 3 load levels (two held out)"
            )
    else:
        for a, b in itertools.combinations(names, 2):
            pair = (setups == a) | (setups == b)
            for c in sorted(set(levels[pair].tolist())):
                test = pair & (levels == c)
                train = ~pair & (levels != c)
                if train.any():
                    out.append(Fold(f"{a}+{b}@{c:g}", rows[train], rows[test]))
        if not out:
            raise InputError("--scheme", scheme, "setups with more than one load level")
    return [f for f in out if f.train.size and f.test.size]


def spread(all_folds: list[Fold], limit: int | None) -> list[Fold]:
    """At most ``limit`` folds, evenly spread over the list (all when ``limit`` is None)."""
    if limit is None or limit >= len(all_folds):
        return all_folds
    picks = np.unique(np.linspace(0, len(all_folds) - 1, limit).round().astype(int))
    return [all_folds[i] for i in picks]


def cover(all_folds: list[Fold]) -> list[Fold]:
    """Few folds that together hold out every observation of ``all_folds``, in their order:
    first every fold whose held-out rows are all new (for ``new-setup`` over 24 setups, 12
    disjoint pairs), then every fold that still holds out a row no chosen fold did."""
    if not all_folds:
        return []
    covered = np.zeros(max(int(f.test.max()) for f in all_folds) + 1, dtype=bool)
    chosen: set[int] = set()
    for disjoint in (True, False):
        for i, f in enumerate(all_folds):
            new = ~covered[f.test]
            if i not in chosen and (new.all() if disjoint else new.any()):
                chosen.add(i)
                covered[f.test] = True
    return [all_folds[i] for i in sorted(chosen)]


def check_no_leak(fold: Fold, setups: np.ndarray, levels: np.ndarray, scheme: str) -> None:
    """AssertionError if a held-out setup / (setup, level) / level is in the training rows."""
    setups = np.asarray(setups).astype(str)
    levels = np.asarray(levels, dtype=float)
    test_setups = set(setups[fold.test].tolist())
    train_setups = set(setups[fold.train].tolist())
    if scheme == "new-setup":
        assert not test_setups & train_setups, (fold.name, test_setups & train_setups)
    elif scheme == "new-level":
        held = set(zip(setups[fold.test].tolist(), levels[fold.test].tolist(), strict=True))
        seen = set(zip(setups[fold.train].tolist(), levels[fold.train].tolist(), strict=True))
        assert not held & seen, (fold.name, held & seen)
    else:
        assert not test_setups & train_setups, (fold.name, test_setups & train_setups)
        held_levels = set(levels[fold.test].tolist()) & set(levels[fold.train].tolist())
        assert not held_levels, (fold.name, held_levels)
    assert not set(fold.test.tolist()) & set(fold.train.tolist()), fold.name


__all__ = ["MIN_SETUPS", "Fold", "check_no_leak", "cover", "folds", "spread"]
