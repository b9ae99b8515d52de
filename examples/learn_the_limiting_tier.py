"""Learn which tier limits a system, and whether it is saturated, from a second of metrics
==========================================================================================

A corpus of 12 setups of the embedded three-tier system, simulated with its queueing twin (web,
app and db capped in turn), then: leave-two-setups-out cross-validation of two classifiers for
the limiting tier and for client / gray / server, each next to the majority baseline; a model
saved and used on a setup it never saw. docs/learning.md has the same on real measurements.
"""

# %%
# The corpus: examples/corpus/embedded.yaml, run with the twin (seconds instead of minutes).
import tempfile
from pathlib import Path

from tierscope.learn import evaluate, load_dataset
from tierscope.learn.classify import classify
from tierscope.learn.corpus import build_corpus
from tierscope.learn.persist import train
from tierscope.spec.learn import LearnOptions, load_corpus_spec

here = Path(__file__).parent
spec = load_corpus_spec(here / "corpus" / "embedded.yaml")
folder = Path(tempfile.mkdtemp()) / "corpus"
corpus = build_corpus(spec, 12, folder, twin=True)
print("capped tiers:", " ".join(s["planted_tier"] for s in corpus["setups"]))

# %%
# One observation per 1 s window of every steady phase; labels from the analysis.
data = load_dataset([folder], window_s=1.0)
print(f"{data.features.height} windows x {len(data.feature_names)} features")

# %%
# Every pair of setups held out in turn (66 folds); the baseline always answers the majority.
for target in ("tier", "saturation"):
    options = LearnOptions(
        target=target, models=("random_forest", "logistic_regression"), compare_features=False
    )
    doc = evaluate(data, options)
    best = doc["models"][doc["best"]]
    mistakes = best["major_mistake_rate"]
    print(
        f"{target:>10}: {doc['best']} {best['accuracy']:.1%} over {doc['folds']} folds, "
        f"majority baseline {doc['baseline']:.1%}"
        + ("" if mistakes is None else f", major mistakes {mistakes:.1%}")
    )

# %%
# Save a model and classify the last second of a setup it never saw (built to be db-limited).
model = Path(tempfile.mkdtemp()) / "bb.model"
bundle = train(data, target="saturation", model="random_forest", feature_set="all")
fresh = spec.model_copy(update={"seed": 99, "vary": spec.vary.model_copy(update={"tiers": ["db"]})})
build_corpus(fresh, 1, folder.parent / "fresh", twin=True)
answer = classify(bundle, folder.parent / "fresh" / "setup-000")
print(
    f"fresh setup at 80 users: {answer['saturation']['class']}, limited by "
    f"{answer['tier']['class']} (p = {answer['tier']['probabilities']['db']:.2f})"
)
