"""Learning at full size: its speed against a plain scikit-learn loop (issue 5 of tierscope's
learning items), and its accuracy on REAL corpora, every leave-two-setups-out fold (issue 8).

0. **Speed** (``test_learn_speed_against_a_random_forest_loop``): a twin corpus of 24 setups x 14
   levels x 3 repetitions (one 1 s window per steady phase: 1,008 observations, 152 features).
   ``learn`` with its defaults (read the corpus, cross-validate all five models over the 276
   leave-two-setups-out folds, compare the feature sets, permutation importance) against the
   anchor: a loop that fits one ``RandomForestClassifier(n_estimators=50)`` per fold on the same
   feature table and folds, what a user would write to get one number. Both run in this
   process, one after the other; the ratio learn / anchor and every accuracy are printed and
   recorded (target: ratio <= 1; the benchmark reports, it does not fail on timing).
1. **Embedded corpus**: 24 setups of the embedded three-tier system (``examples/corpus/
   embedded.yaml``; web, app and db each capped in 8), 6 load levels of 4 s, 1 s observation
   windows. Targets: client/gray/server accuracy >= 90 % with major mistakes <= 3 %, limiting
   tier >= 95 %, each next to its majority baseline (the anchor: always answering the majority
   class, scored on the same folds).
2. **Webstack corpus** (nginx -> app -> PostgreSQL 15, ``examples/corpus/webstack.yaml``), the
   same pipeline; it reports its scores (no target). Needs nginx-light and postgresql-15.
3. **Graph corpus** (issue 16): 24 setups of the shop call graph (``examples/corpus/graph.yaml``;
   the catalogue's database, payment and orders each capped in 8), measured on the embedded
   system: the limiting component of setups never seen, against the majority baseline
   (target: >= 90 %), and client/gray/server.

A corpus takes about 40 s per setup (16 minutes for 24); set ``TIERSCOPE_CORPUS_DIR`` to keep
the corpora between runs (a complete setup is not run again).
"""

from __future__ import annotations

import os
import resource
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.harness import load_average
from tierscope.learn import evaluate, load_dataset
from tierscope.learn.corpus import build_corpus
from tierscope.learn.crossval import check_no_leak, folds
from tierscope.spec.learn import CorpusSpec, LearnOptions, load_corpus_spec

ROOT = Path(__file__).resolve().parents[1]
SETUPS = 24
Recorder = Callable[[str, Mapping[str, Any]], Path]

pytestmark = pytest.mark.timeout(3600)


#: The speed corpus: the embedded system's twin, 14 levels x 3 repetitions of a 1 s steady phase.
SPEED_SPEC: dict[str, Any] = {
    "name": "speed",
    "seed": 1,
    "experiment": {
        "system": {"kind": "embedded", "topology": "1/1/1"},
        "workload": {
            "mode": "closed",
            "think_time": {"dist": "exp", "mean": 0.3},
            "mix": "browse-only",
        },
        "sweep": {
            "levels": [2, 5, 8, 12, 16, 20, 25, 30, 35, 42, 50, 60, 70, 80],
            "repetitions": 3,
        },
        "phases": {"ramp_up": 1.0, "steady": 1.0, "ramp_down": 0.0},
    },
    "vary": {
        "tiers": ["web", "app", "db"],
        "capped_cpu": [0.12, 0.25],
        "capped_cost": [0.0015, 0.003],
        "other_cpu": [0.6, 1.0],
        "other_cost": [0.0, 0.0004],
    },
}
ANCHOR_TREES = 50


def _root() -> Path:
    base = os.environ.get("TIERSCOPE_CORPUS_DIR")
    return Path(base) if base else Path(tempfile.mkdtemp(prefix="tierscope-corpus-"))


def _anchor(X: np.ndarray, y: np.ndarray, setups: np.ndarray, levels: np.ndarray) -> float:
    """The plain loop: one 50-tree random forest per leave-two-setups-out fold; mean accuracy."""
    from sklearn.ensemble import RandomForestClassifier

    accuracies = []
    for fold in folds(setups, levels, "new-setup"):
        check_no_leak(fold, setups, levels, "new-setup")
        forest = RandomForestClassifier(n_estimators=ANCHOR_TREES, random_state=0)
        forest.fit(X[fold.train], y[fold.train])
        accuracies.append(float(np.mean(forest.predict(X[fold.test]) == y[fold.test])))
    return float(np.mean(accuracies))


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def test_learn_speed_against_a_random_forest_loop(record: Recorder) -> None:
    from joblib.externals.loky import get_reusable_executor

    corpus = _root() / "speed"
    build_corpus(CorpusSpec.model_validate(SPEED_SPEC), SETUPS, corpus, twin=True)
    get_reusable_executor().shutdown(wait=True)  # learn starts its own workers, as the CLI does
    options = LearnOptions()  # what `tierscope learn DIR` runs
    cpu0, t0 = _cpu_s(), time.perf_counter()
    data = load_dataset([corpus], options.window_s)
    t1 = time.perf_counter()
    doc = evaluate(data, options)
    t2 = time.perf_counter()
    get_reusable_executor().shutdown(wait=True)  # the workers' CPU time counts once they end
    learn_cpu = _cpu_s() - cpu0
    learn_s, read_s = t2 - t0, t1 - t0
    table = data.labelled(options.target)
    X = table.features.to_numpy().astype(float)
    y = np.asarray(table.labels[options.target], dtype=object)
    cpu3, t3 = _cpu_s(), time.perf_counter()
    anchor_accuracy = _anchor(X, y, table.setups, table.levels)
    anchor_s, anchor_cpu = time.perf_counter() - t3, _cpu_s() - cpu3
    ratio = learn_s / anchor_s
    print(
        f"\nlearn on {doc['observations']} observations x {X.shape[1]} features, "
        f"{doc['setups']} setups, {doc['folds']} folds, {len(doc['models'])} models "
        f"+ feature sets + importance, {os.cpu_count()} cores: {learn_s:.1f} s (reading "
        f"{read_s:.1f} s, cross-validation {t2 - t1:.1f} s), {learn_cpu:.1f} CPU s\n"
        f"anchor ({ANCHOR_TREES}-tree random forest per fold, one process): {anchor_s:.1f} s, "
        f"{anchor_cpu:.1f} CPU s, accuracy {anchor_accuracy:.4f}\n"
        f"ratio learn / anchor = {ratio:.2f} (target <= 1); CPU seconds learn / anchor = "
        f"{learn_cpu / anchor_cpu:.2f}; load 1 min: {load_average()}"
    )
    for name, s in doc["models"].items():
        print(
            f"  {name:<20} accuracy {s['accuracy']:.4f}  balanced {s['balanced_accuracy']:.4f}"
            f"  major mistakes {s['major_mistake_rate']:.4f}" + ("  (best)" * (name == doc["best"]))
        )
    print(f"  majority baseline    accuracy {doc['baseline']:.4f}")
    print(
        "  feature sets with "
        + doc["best"]
        + ": "
        + ", ".join(
            f"{k} {v['accuracy']:.3f}" for k, v in doc["feature_sets"].items() if v["available"]
        )
    )
    record(
        "learn_speed_vs_forest_loop",
        {
            "observations": doc["observations"],
            "features": int(X.shape[1]),
            "folds": doc["folds"],
            "learn_s": learn_s,
            "read_s": read_s,
            "learn_cpu_s": learn_cpu,
            "anchor_s": anchor_s,
            "anchor_cpu_s": anchor_cpu,
            "ratio": ratio,
            "anchor_accuracy": anchor_accuracy,
            "best": doc["best"],
            "baseline": doc["baseline"],
            "models": {m: s["accuracy"] for m, s in doc["models"].items()},
            "feature_sets": {k: v.get("accuracy") for k, v in doc["feature_sets"].items()},
        },
    )
    assert doc["folds"] == doc["folds_total"] == SETUPS * (SETUPS - 1) // 2


def _corpus(name: str) -> Path:
    out = _root() / name
    build_corpus(load_corpus_spec(ROOT / "examples" / "corpus" / f"{name}.yaml"), SETUPS, out)
    return out


def _scores(corpus: Path) -> dict[str, Any]:
    data = load_dataset([corpus])
    out: dict[str, Any] = {"observations": data.features.height}
    for target in ("saturation", "tier"):
        doc = evaluate(data, LearnOptions.parse({"target": target}))
        out[target] = {
            "baseline": doc["baseline"],
            "best": doc["best"],
            "folds": doc["folds"],
            "models": {
                m: {k: s[k] for k in ("accuracy", "balanced_accuracy", "major_mistake_rate")}
                for m, s in doc["models"].items()
            },
            "feature_sets": {k: v.get("accuracy") for k, v in doc["feature_sets"].items()},
        }
        best = doc["models"][doc["best"]]
        print(
            f"\n{corpus.name} {target}: {doc['best']} {best['accuracy']:.3f} "
            f"(balanced {best['balanced_accuracy']:.3f}, major mistakes "
            f"{best['major_mistake_rate']}) vs majority baseline {doc['baseline']:.3f}, "
            f"{doc['folds']} folds"
        )
    return out


def test_embedded_corpus(record: Recorder) -> None:
    corpus = _corpus("embedded")
    result = _scores(corpus)
    record("learn_embedded_corpus", result)
    sat, tier = result["saturation"], result["tier"]
    assert sat["folds"] == SETUPS * (SETUPS - 1) // 2
    best = sat["models"][sat["best"]]
    assert best["accuracy"] >= 0.90 and best["major_mistake_rate"] <= 0.03
    assert tier["models"][tier["best"]]["accuracy"] >= 0.95


def test_webstack_corpus(record: Recorder) -> None:
    from tierscope.experiment.targets.webstack import INSTALL_HINT, missing_parts

    if missing_parts():
        pytest.fail(f"needs {', '.join(missing_parts())}: {INSTALL_HINT}")
    result = _scores(_corpus("webstack"))
    record("learn_webstack_corpus", result)


def test_graph_corpus(record: Recorder) -> None:
    result = _scores(_corpus("graph"))
    record("learn_graph_corpus", result)
    tier = result["tier"]
    assert tier["folds"] == SETUPS * (SETUPS - 1) // 2
    best = tier["models"][tier["best"]]
    assert best["accuracy"] >= 0.90 and best["accuracy"] > tier["baseline"] + 0.25
