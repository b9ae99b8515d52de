"""tierscope: find, explain and predict performance bottlenecks in multi-tier systems.

Layers (PRODUCT.md §2): ``spec`` (file schemas) → ``qn`` (queueing models and solvers) and, in
later releases, ``sim``, ``experiment``, ``store``, ``analysis``, ``estimate``, ``plan``,
``report``; only ``cli`` wires them together.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version

try:
    __version__ = _dist_version("tierscope")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0+unknown"

__all__ = ["__version__"]
