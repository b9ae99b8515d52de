"""Acceptance of issue 8 at full size: learning on REAL corpora, every leave-two-setups-out fold.

1. **Embedded corpus**: 24 setups of the embedded three-tier system (``examples/corpus/
   embedded.yaml``; web, app and db each capped in 8), 6 load levels of 4 s, 1 s observation
   windows. Targets: client/gray/server accuracy >= 90 % with major mistakes <= 3 %, limiting
   tier >= 95 %, each next to its majority baseline (the anchor: always answering the majority
   class, scored on the same folds).
2. **Webstack corpus** (nginx -> app -> PostgreSQL 15, ``examples/corpus/webstack.yaml``), the
   same pipeline; it reports its scores (no target). Needs nginx-light and postgresql-15.

A corpus takes about 40 s per setup (16 minutes for 24); set ``TIERSCOPE_CORPUS_DIR`` to keep
the corpora between runs (a complete setup is not run again).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tierscope.learn import evaluate, load_dataset
from tierscope.learn.corpus import build_corpus
from tierscope.spec.learn import LearnOptions, load_corpus_spec

ROOT = Path(__file__).resolve().parents[1]
SETUPS = 24
Recorder = Callable[[str, Mapping[str, Any]], Path]

pytestmark = pytest.mark.timeout(3600)


def _corpus(name: str) -> Path:
    base = os.environ.get("TIERSCOPE_CORPUS_DIR")
    root = Path(base) if base else Path(tempfile.mkdtemp(prefix="tierscope-corpus-"))
    out = root / name
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
