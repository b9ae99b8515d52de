"""Corpora for learning: many setups of one system, each run as a load sweep.

``setups(spec, n)`` draws ``n`` setups from a :class:`~tierscope.spec.learn.CorpusSpec` (setup
``i`` caps component ``tiers[i % len(tiers)]`` of the three-tier shorthand or of a call graph:
smaller CPU quota, higher per-request CPU cost, one replica; every other knob drawn from
``(seed, i)``); ``build_corpus`` runs each one into its own
run folder ``DIR/<setup>/`` with the experiment runner, or with the simulator twin, and writes
``DIR/corpus.json`` (the setups, their overrides and the tier each one was built to limit).

Design decisions:

* One run folder per setup, so a failure in setup 17 keeps setups 0-16, and a second call with
  the same spec resumes: a setup whose folder holds a complete run is not run again, and an
  incomplete one is renamed ``<setup>.partial`` (kept, outside the corpus) and run anew.
* Each folder is analysed right away (``analysis.json``): the learning reads its labels from
  there, and the analysis happens while the run is at hand.
* The twin is a closed queueing network with one processor-sharing station per tier (or
  component) and ``replicas`` servers; a tier's demand per page is (its own overhead + the
  drawn per-request cost) / its CPU quota, a component's the same per visit times its visits
  per request (from the calls' probabilities and counts); the overheads are rough measurements
  of the embedded servers. It is a stand-in for scale (hundreds of setups in minutes), not a
  calibrated model.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tierscope.errors import InputError
from tierscope.progress import step
from tierscope.spec.experiment import TIERS, apply_override, parse_experiment
from tierscope.spec.learn import CorpusSpec

CORPUS_JSON = "corpus.json"
#: CPU seconds per page each embedded tier spends besides its configured cost (measured on the
#: default system: app about 0.24 ms, db about 0.2 ms; web's proxying about 0.4 ms).
TWIN_OVERHEAD_S = {"web": 0.0004, "app": 0.00025, "db": 0.0002}
#: CPU seconds per visit a component of a call graph spends besides its configured cost
#: (measured on examples/graph.yaml: 0.3-0.4 ms, its calls included).
COMPONENT_OVERHEAD_S = 0.0003


def _draw(rng: random.Random, pair: tuple[float, float]) -> float:
    return round(rng.uniform(pair[0], pair[1]), 4)


def _draw_int(rng: random.Random, pair: tuple[int, int] | tuple[float, float]) -> int:
    return rng.randint(int(pair[0]), int(pair[1]))


def setups(spec: CorpusSpec, n: int) -> list[dict[str, Any]]:
    """``n`` setups: ``{"name", "planted_tier", "set": {path: value}}`` each, deterministic."""
    if n < 1:
        raise InputError("--setups", n, "at least 1 setup")
    v = spec.vary
    names, shorthand = spec.components, spec.shorthand
    section = "system.tiers" if shorthand else "system.components"
    out = []
    for i in range(n):
        rng = random.Random(f"{spec.seed}/{i}")
        capped = spec.capped[i % len(spec.capped)]
        sets: dict[str, Any] = {}
        replicas = {}
        for tier in names:
            is_capped = tier == capped
            capped_cpu = v.capped_cpu_by_tier.get(tier, v.capped_cpu)
            sets[f"{section}.{tier}.cpu"] = _draw(rng, capped_cpu if is_capped else v.other_cpu)
            if tier in spec.costs_on:
                sets[f"{section}.{tier}.cpu_cost"] = _draw(
                    rng, v.capped_cost if is_capped else v.other_cost
                )
            replicas[tier] = 1 if is_capped else _draw_int(rng, v.replicas)
            if v.workers is not None:
                sets[f"{section}.{tier}.workers"] = _draw_int(rng, v.workers)
            if not shorthand:
                sets[f"{section}.{tier}.replicas"] = replicas[tier]
        if shorthand:
            sets["system.topology"] = "/".join(str(replicas[t]) for t in TIERS)
        if v.db_pool is not None:
            sets["system.tiers.app.db_pool"] = _draw_int(rng, v.db_pool)
        if v.mixes:
            sets["workload.mix"] = rng.choice(v.mixes)
        if v.think_time is not None:
            sets["workload.think_time"] = {"dist": "exp", "mean": _draw(rng, v.think_time)}
        out.append({"name": f"setup-{i:03d}", "planted_tier": capped, "set": sets})
    return out


def setup_document(spec: CorpusSpec, setup: dict[str, Any], source: str) -> dict[str, Any]:
    """The experiment document of one setup (base experiment + its overrides), validated."""
    doc = copy.deepcopy(spec.experiment)
    doc["name"] = f"{spec.name}-{setup['name']}"
    for path, value in setup["set"].items():
        apply_override(doc, path, value, source=f"{source} ({setup['name']})")
    parse_experiment(doc, source=f"{source} ({setup['name']})")
    return doc


def twin_model(doc: dict[str, Any]) -> Any:
    """The queueing twin of one embedded setup document (see the module docstring)."""
    from tierscope.spec.model import parse_model

    spec = parse_experiment(doc)
    system = spec.system
    replicas = system.replicas
    demands = {}
    if system.components is None:
        for tier in TIERS:
            t = system.tier(tier)
            cost = (t.cpu_cost or {}).get("default", 0.0)
            demands[tier] = (TWIN_OVERHEAD_S[tier] + cost) / (t.cpu or 1.0)
    else:
        visits = system.graph.visits()
        for name, c in system.components.items():
            cost = (c.cpu_cost or {}).get("default", 0.0)
            demands[name] = visits[name] * (COMPONENT_OVERHEAD_S + cost) / (c.cpu or 1.0)
    think = spec.workload.get("think_time", {"mean": 0.5})
    think_mean = float(think["mean"] if isinstance(think, dict) else think)
    model = {
        "name": doc.get("name", "twin"),
        "stations": [
            {"name": name, "type": "queue", "servers": replicas[name], "discipline": "ps"}
            for name in demands
        ],
        "classes": [
            {
                "name": "users",
                "population": 1,
                "think_time": think_mean,
                "demands": {k: v for k, v in demands.items() if v > 0},
            }
        ],
    }
    return parse_model(model, source=f"twin of {doc.get('name')}")


def _complete(run_dir: Path) -> bool:
    from tierscope.store import read_analysis, run_status

    return run_status(run_dir) == "complete" and read_analysis(run_dir) is not None


def build_corpus(
    spec: CorpusSpec,
    n: int,
    out_dir: Path,
    *,
    twin: bool = False,
    source: str = "<corpus>",
    on_setup: Callable[[int, int, str, str], None] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Run ``n`` setups into ``out_dir/<setup>/`` and write ``corpus.json``; returns it.

    ``on_setup(done, n, name, planted_tier)`` after each setup; ``progress(stage, done, n)``
    (else :func:`tierscope.progress.step`) once before the first setup and after each, with the
    stage "simulating setups" (``twin``) or "running setups"."""
    from tierscope.analysis import analyze
    from tierscope.store import read_run, write_analysis

    if twin:
        kind = (spec.experiment.get("system") or {}).get("kind", "embedded")
        if kind != "embedded":
            raise InputError(
                "experiment.system.kind",
                kind,
                "embedded (the twin models the embedded tiers)",
                source=source,
            )
    chosen = setups(spec, n)
    docs = [setup_document(spec, s, source) for s in chosen]  # validate all before running
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = {
        "name": spec.name,
        "kind": "twin" if twin else "measured",
        "spec": spec.model_dump(mode="json"),
        "setups": [],
    }
    stage = "simulating setups" if twin else "running setups"
    report = progress or step
    report(stage, 0, n)
    for i, (setup, doc) in enumerate(zip(chosen, docs, strict=True)):
        run_dir = out_dir / setup["name"]
        status = "kept"
        if not _complete(run_dir):
            if run_dir.exists():
                _set_aside(run_dir)
            if twin:
                _run_twin(doc, run_dir)
            else:
                from tierscope.experiment import run_experiment

                run_experiment(parse_experiment(doc), doc, run_dir, source=source)
            write_analysis(run_dir, analyze(read_run(run_dir)))
            status = "run"
        manifest["setups"].append(setup | {"status": status})
        (out_dir / CORPUS_JSON).write_text(json.dumps(manifest, indent=2) + "\n")
        if on_setup is not None:
            on_setup(i + 1, n, setup["name"], setup["planted_tier"])
        report(stage, i + 1, n)
    return manifest


def _run_twin(doc: dict[str, Any], run_dir: Path) -> None:
    from tierscope.sim import record_simulated_sweep

    spec = parse_experiment(doc)
    record_simulated_sweep(
        {"s0": twin_model(doc)},
        run_dir,
        levels=spec.sweep.level_values,
        steady=spec.phases.steady,
        ramp_up=spec.phases.ramp_up,
        repetitions=spec.sweep.repetitions,
        window=spec.monitor.interval,
        seed=spec.system.seed,
    )


def _set_aside(run_dir: Path) -> None:
    """Keep an incomplete run (what it measured is not thrown away) out of the corpus."""
    aside = run_dir.with_name(run_dir.name + ".partial")
    if aside.exists():
        import shutil

        shutil.rmtree(aside)
    run_dir.rename(aside)


__all__ = ["CORPUS_JSON", "build_corpus", "setup_document", "setups", "twin_model"]
