"""Pydantic schemas of every tierscope file format, and their loaders."""

from __future__ import annotations

from pathlib import Path

from tierscope.spec._load import inline_schedule_files, load_yaml
from tierscope.spec.model import ClassSpec, Model, ServiceDist, Station, parse_model
from tierscope.spec.workload import Workload, load_workload, merge_workload, parse_workload


def load_model(path: str | Path) -> Model:
    """Read and validate a queueing-network model file (PRODUCT.md §4.1).

    Load schedules may name a CSV trace (``file:``, relative to the model file).
    """
    data = inline_schedule_files(load_yaml(path), Path(path).parent, str(path))
    return parse_model(data, source=str(path))


__all__ = [
    "ClassSpec",
    "Model",
    "ServiceDist",
    "Station",
    "Workload",
    "load_model",
    "load_workload",
    "load_yaml",
    "merge_workload",
    "parse_model",
    "parse_workload",
]
