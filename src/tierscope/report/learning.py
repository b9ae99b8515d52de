"""Terminal rendering of ``tierscope learn`` and ``tierscope classify`` documents."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text


def _pct(v: Any) -> str:
    return "—" if v is None else f"{100 * float(v):.1f} %"


def learn_summary(doc: dict[str, Any]) -> RenderableType:
    """Scores per model next to the baseline, the feature sets, the important metrics."""
    head = Text(
        f"{doc['target']} · scheme {doc['scheme']} · features {doc['features']} · "
        f"{doc['observations']} observations from {doc['setups']} setups · "
        f"{doc['folds']} of {doc['folds_total']} folds",
        style="bold",
    )
    models = Table(title="cross-validated scores", title_justify="left")
    for col in ("model", "accuracy", "± (folds)", "balanced acc.", "major mistakes"):
        models.add_column(col, justify="left" if col == "model" else "right")
    models.add_row(
        f"majority ({doc['majority_class']})",
        _pct(doc["baseline"]),
        "",
        _pct(doc["baseline_detail"]["balanced_accuracy"]),
        _pct(doc["baseline_detail"]["major_mistake_rate"]),
        style="dim",
    )
    for name, s in doc["models"].items():
        models.add_row(
            name + (" ★" if name == doc["best"] else ""),
            _pct(s["accuracy"]),
            _pct(s["accuracy_std"]),
            _pct(s["balanced_accuracy"]),
            _pct(s["major_mistake_rate"]),
        )
    best = doc["models"][doc["best"]]["confusion"]
    matrix = Table(title=f"confusion of {doc['best']} (rows: truth)", title_justify="left")
    matrix.add_column("")
    for c in best["labels"]:
        matrix.add_column(c, justify="right")
    for c, row in zip(best["labels"], best["matrix"], strict=True):
        matrix.add_row(c, *(str(v) for v in row))
    parts: list[RenderableType] = [head, models, matrix]
    if doc.get("feature_sets"):
        sets = Table(title=f"feature sets with {doc['best']}", title_justify="left")
        for col in ("set", "features", "accuracy", "balanced acc.", "major mistakes"):
            sets.add_column(col, justify="left" if col == "set" else "right")
        for name, s in doc["feature_sets"].items():
            if not s.get("available", True):
                sets.add_row(name, "0", "—", "—", "—", style="dim")
                continue
            n = s.get("n_features")
            sets.add_row(
                name,
                "per fold" if n is None else str(n),
                _pct(s["accuracy"]),
                _pct(s["balanced_accuracy"]),
                _pct(s["major_mistake_rate"]),
            )
        parts.append(sets)
    if doc.get("importance"):
        imp = Table(title="permutation importance (accuracy drop)", title_justify="left")
        imp.add_column("metric")
        imp.add_column("drop", justify="right")
        for d in doc["importance"][:10]:
            imp.add_row(d["metric"], _pct(d["accuracy_drop"]))
        parts.append(imp)
    parts += [Text(n, style="yellow") for n in doc.get("notes", [])]
    return Group(*parts)


def classify_summary(doc: dict[str, Any]) -> RenderableType:
    table = Table(
        title=f"window {doc['window']['t_start']:.2f}–{doc['window']['t_end']:.2f} s",
        title_justify="left",
    )
    for col in ("question", "answer", "probabilities", "model"):
        table.add_column(col)
    names = {"saturation": "saturated side", "tier": "limiting tier"}
    for target in ("saturation", "tier"):
        if target in doc:
            d = doc[target]
            probs = "  ".join(f"{c} {100 * p:.0f} %" for c, p in d["probabilities"].items())
            table.add_row(names[target], d["class"], probs, d["model"])
    parts: list[RenderableType] = [table]
    if doc.get("missing_features"):
        parts.append(Text(f"{doc['missing_features']} features missing (imputed)", style="yellow"))
    return Group(*parts)


__all__ = ["classify_summary", "learn_summary"]
