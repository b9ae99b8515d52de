"""Fixtures shared by the benchmarks: host facts, the results log, and the LINE reference solver.

The helpers themselves live in :mod:`benchmarks.harness` (importable from benchmark modules);
this file exposes them as fixtures and prints the host facts first, so every benchmark run
starts by saying where it ran.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from benchmarks import harness

#: The LINE release the benchmarks were written against (pinned in the ``bench`` extra).
LINE_VERSION = "3.0.8.0"


def _host_lines() -> list[str]:
    facts = harness.host_facts()
    versions = ", ".join(f"{k} {v}" for k, v in facts["versions"].items() if v)
    return [
        f"bench host: {facts['hostname']}, {facts['cpu_model']}, {facts['cores']} cores "
        f"({facts['usable_cores']} usable), Python {facts['python']}",
        f"bench versions: {versions}; tierscope._native build: {facts['native_build']}",
    ]


def pytest_report_header() -> list[str]:
    return _host_lines()


@pytest.fixture(scope="session", autouse=True)
def _print_host() -> None:
    """Say where the benchmarks ran (the pytest header is hidden under -q)."""
    print("\n" + "\n".join(_host_lines()))


@pytest.fixture(scope="session")
def host() -> dict[str, Any]:
    """Host facts (cores, CPU model, Python, versions) recorded with every result."""
    return harness.host_facts()


@pytest.fixture(scope="session")
def record() -> Callable[[str, Mapping[str, Any]], Path]:
    """``record(name, data)``: append a dated JSON line with host facts to benchmarks/results/."""
    return harness.record


@pytest.fixture(scope="session")
def line_solver() -> ModuleType:
    """The ``line_solver`` package (LINE), or a failure that says how to install it."""
    problem: ImportError | None = None
    try:
        # LINE 3.0.8.0 imports numpy.matlib (PendingDeprecationWarning), which the project's
        # `filterwarnings = error` would turn into an import failure.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module("line_solver")
    except ImportError as exc:
        problem = exc
    if problem is not None:
        pytest.fail(
            f"LINE is not importable ({problem}); the benchmarks compare against it: "
            f"pip install line-solver=={LINE_VERSION}  (the 'bench' extra; `make bench` installs "
            "it)",
            pytrace=False,
        )
    installed = harness.host_facts()["versions"]["line-solver"]
    if installed != LINE_VERSION:
        print(f"\nnote: LINE {installed} installed, benchmarks were written for {LINE_VERSION}")
    module.GlobalConstants.set_verbose(module.VerboseLevel.SILENT)
    return module
