"""Bottleneck analysis of a run: where it saturates, which tier and resource limit it, which
metrics warn of it, and which millibottlenecks cause the very long requests.

``analyze(run, options)`` takes a run read by :func:`tierscope.store.read_run` (measured,
simulated or imported) and returns the ``analysis.json`` document of PRODUCT.md §4.5; it does no
file I/O. One module per analysis: :mod:`.saturation`, :mod:`.bottleneck`, :mod:`.indicators`,
:mod:`.millibottlenecks` (with :mod:`.resources`, the metric -> resource table they share).
"""

from __future__ import annotations

from tierscope.analysis._analyze import analyze, steady_windows, tier_order
from tierscope.spec.analysis import AnalysisDocument, AnalysisOptions

__all__ = ["AnalysisDocument", "AnalysisOptions", "analyze", "steady_windows", "tier_order"]
