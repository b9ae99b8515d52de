"""Root-cause accuracy on incident data nobody here made (issue 17): the suspects of
``tierscope analyze`` on the Sock Shop fault cases and the PetShop issues in ../shared/validation,
as AC@1, AC@3 and Avg@5 beside the published numbers in their READMEs.

One method for every case, no per-case option: Sock Shop imports each case's ``anomalous.csv``
with its ``normal.csv`` as ``--baseline``; PetShop imports each issue's ``metrics.csv`` with its
scenario's ``graph.csv`` as ``--graph``, normal behaviour being the rows before the symptom's
time (``target.timestamp``, given to every method upstream too). PetShop's upstream baseline
fits its normal behaviour on 49 hours of normal-operation recordings that this folder does not
hold; here only the two rows before the symptom are normal, so the comparison is indicative.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from tierscope.analysis import analyze
from tierscope.ingest import import_metrics
from tierscope.spec.analysis import AnalysisOptions
from tierscope.store import read_run

Recorder = Callable[[str, Mapping[str, Any]], Path]
VALIDATION = Path(__file__).resolve().parents[2] / "shared" / "validation"
#: PetShop's anomaly-traversal baseline (README), pooled over its scenarios per target metric:
#: top-1 and top-3 recall weighted by the number of issues of each scenario.
PUBLISHED_TOP1 = {"latency": (14 * 0.571 + 14 * 0.571 + 8 * 1.0) / 36,
                  "availability": (12 * 0.833 + 12 * 0.667 + 8 * 0.75) / 32}  # fmt: skip
PUBLISHED_TOP3 = {"latency": (14 * 0.571 + 14 * 0.786 + 8 * 1.0) / 36,
                  "availability": (12 * 1.0 + 12 * 1.0 + 8 * 1.0) / 32}  # fmt: skip


def _scores(ranks: list[int | None]) -> dict[str, float]:
    n = len(ranks)
    at = lambda k: sum(1 for r in ranks if r is not None and r <= k) / n  # noqa: E731
    return {"ac1": at(1), "ac3": at(3), "avg5": sum(at(k) for k in range(1, 6)) / 5, "n": n}


def _rank(doc: dict[str, Any], root: str) -> int | None:
    named = [s["tier"] for s in doc["suspects"] if "no departure" not in s["evidence"]]
    return named.index(root) + 1 if root in named else None


def test_suspects_on_sock_shop_and_petshop(tmp_path: Path, record: Recorder) -> None:
    sock = VALIDATION / "sockshop"
    ranks, right_resource = [], 0
    for case, component, fault in pl.read_csv(sock / "answers.csv").iter_rows():
        where = sock / "cases" / case
        out, _ = import_metrics(tmp_path / case, [where / "anomalous.csv"],
                                baseline=[where / "normal.csv"])  # fmt: skip
        doc = analyze(read_run(out))
        ranks.append(_rank(doc, component))
        first = doc["suspects"][0]
        right_resource += first["tier"] == component and first["resource"] == {
            "cpu": "cpu", "mem": "memory"}[fault]  # fmt: skip
    sock_scores = _scores(ranks) | {"right_resource_at_1": right_resource / len(ranks)}

    pet = VALIDATION / "petshop"
    by_metric: dict[str, list[int | None]] = {}
    for issue, root, metric in pl.read_csv(pet / "answers.csv").iter_rows():
        where = pet / issue
        out, _ = import_metrics(tmp_path / issue.replace("/", "-"), [where / "metrics.csv"],
                                graph=pet / issue.split("/")[0] / "graph.csv")  # fmt: skip
        run = read_run(out)
        symptom = json.loads((where / "target.json").read_text())["target"]["timestamp"]
        origin = dt.datetime.fromisoformat(run.spec.time_origin).timestamp()  # type: ignore[union-attr]
        doc = analyze(run, AnalysisOptions(normal_until_s=symptom - origin))
        by_metric.setdefault(metric, []).append(_rank(doc, root))
    pet_scores = {m: _scores(r) for m, r in by_metric.items()}
    pet_scores["all"] = _scores([r for rs in by_metric.values() for r in rs])

    print(f"\n{'data':28} {'n':>3} {'AC@1':>6} {'AC@3':>6} {'Avg@5':>6}  published top-1 / top-3")
    s = sock_scores
    print(f"{'Sock Shop (10 cases)':28} {s['n']:>3} {s['ac1']:6.3f} {s['ac3']:6.3f} "
          f"{s['avg5']:6.3f}  resource right at 1: {s['right_resource_at_1']:.0%}")  # fmt: skip
    for m, s in pet_scores.items():
        pub = (f"{PUBLISHED_TOP1[m]:.3f} / {PUBLISHED_TOP3[m]:.3f}" if m in PUBLISHED_TOP1
               else "")  # fmt: skip
        print(f"{'PetShop ' + m:28} {s['n']:>3} {s['ac1']:6.3f} {s['ac3']:6.3f} "
              f"{s['avg5']:6.3f}  {pub}")  # fmt: skip
    record("rca_accuracy", {"sockshop": sock_scores, "petshop": pet_scores})
