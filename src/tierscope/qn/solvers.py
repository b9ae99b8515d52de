"""The registry of analytic methods, keyed by the names the CLI accepts, and the ``auto`` choice.

Design decision: an explicit dict (not subclass discovery), so a new method is one module plus one
line here; ``auto`` is a plain function of the model's size, and its reason is recorded in the
solution's notes so users can see which method answered and why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tierscope.errors import InputError
from tierscope.qn import amva, bounds, ctmc, mva, nc
from tierscope.qn import open as open_solver
from tierscope.qn.network import Network
from tierscope.qn.result import Solution

#: Largest population lattice that ``auto`` hands to exact MVA (a few ms per 1e5 points).
EXACT_LATTICE_LIMIT = 2_000_000
#: Longest estimated exact recursion that ``auto`` starts; beyond it Linearizer answers (its
#: cost does not grow with the population).
AUTO_EXACT_SECONDS = 5.0

METHODS: dict[str, Callable[..., Any]] = {
    "exact": mva.solve,
    "amva": amva.solve_schweitzer,
    "linearizer": amva.solve_linearizer,
    "nc": nc.solve,
    "ctmc": ctmc.solve,
    "open": open_solver.solve,
    "bounds": bounds.solve,
}


def choose_method(net: Network) -> tuple[str, str]:
    """The method ``auto`` uses for ``net``, and why."""
    if net.is_open.all():
        return "open", "all classes are open"
    cost = mva.exact_cost(net)
    quick = cost.seconds <= AUTO_EXACT_SECONDS and cost.feasible()
    if cost.vectors <= EXACT_LATTICE_LIMIT and quick:
        return "exact", f"population lattice of {cost.vectors:,} points <= {EXACT_LATTICE_LIMIT:,}"
    if net.is_open.any():
        # Linearizer and Schweitzer take closed classes only: exact, or its refusal, it is.
        return "exact", "mixed network (the closed part is solved exactly)"
    return "linearizer", (
        f"population lattice of {cost.vectors:,} points (exact MVA: about "
        f"{mva._duration(cost.seconds)}): approximate MVA"
    )


def solve(net: Network, method: str = "auto", **options: Any) -> Solution | bounds.BoundsResult:
    """Solve ``net`` with a named method (``auto`` picks one and says which in the notes)."""
    if method == "auto":
        chosen, why = choose_method(net)
        result = METHODS[chosen](net, **options)
        result.notes.insert(0, f"auto chose '{chosen}': {why}")
        return result
    if method not in METHODS:
        raise InputError("method", method, "one of auto, " + ", ".join(METHODS))
    return METHODS[method](net, **options)


__all__ = ["EXACT_LATTICE_LIMIT", "METHODS", "Solution", "choose_method", "solve"]
