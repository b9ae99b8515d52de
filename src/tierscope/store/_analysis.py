"""``analysis.json`` and ``report.html`` in a run folder, written atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tierscope.errors import InputError
from tierscope.store._run import RUN_JSON, _finite

ANALYSIS_JSON = "analysis.json"
REPORT_HTML = "report.html"
#: Written by ``tierscope calibrate`` beside the model (by default in the run folder).
CALIBRATION_JSON = "calibration.json"

__all__ = ["ANALYSIS_JSON", "REPORT_HTML", "read_analysis", "write_analysis", "write_report"]


def _atomic(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError("output", str(path), f"a writable file ({exc.strerror or exc})") from None
    return path


def _run_dir(run_dir: str | os.PathLike[str]) -> Path:
    path = Path(run_dir)
    if not (path / RUN_JSON).is_file():
        raise InputError("run_dir", str(path), f"a run folder (with {RUN_JSON})")
    return path


def write_analysis(run_dir: str | os.PathLike[str], doc: dict[str, Any]) -> Path:
    """Write ``analysis.json`` into the run folder; returns its path."""
    path = _run_dir(run_dir) / ANALYSIS_JSON
    return _atomic(path, json.dumps(_finite(doc), indent=2, allow_nan=False) + "\n")


def _read_doc(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or None when it is missing or unreadable."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def read_analysis(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The run's ``analysis.json``, or None when it has none (or it is unreadable)."""
    return _read_doc(_run_dir(run_dir) / ANALYSIS_JSON)


def read_calibration(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The run's ``calibration.json`` (model vs measurement), or None when it has none."""
    doc = _read_doc(_run_dir(run_dir) / CALIBRATION_JSON)
    return doc if doc is not None and isinstance(doc.get("figure"), dict) else None


def write_report(
    run_dir: str | os.PathLike[str], html: str, out: str | os.PathLike[str] | None = None
) -> Path:
    """Write the HTML report to ``out`` (default ``report.html`` in the run folder)."""
    path = Path(out) if out is not None else _run_dir(run_dir) / REPORT_HTML
    return _atomic(path, html)
