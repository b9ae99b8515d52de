"""Experiment store: one folder per run with ``run.json`` and Parquet tables (PRODUCT §4.3).

Only this package reads and writes run folders. :class:`RunWriter` streams tables to disk as a
run goes and closes the folder as ``complete``, ``partial`` or ``failed``; :func:`read_run`
reads one back (the simulator writes its traces and simulated sweeps through :class:`RunWriter`:
:mod:`tierscope.sim.record`); :func:`write_import` writes what :mod:`tierscope.ingest` read
from other tools' files;
:func:`write_analysis` and :func:`write_report` add ``analysis.json`` and ``report.html``. It
imports nothing above it.
"""

from __future__ import annotations

from tierscope.store._analysis import (
    read_analysis,
    read_calibration,
    write_analysis,
    write_report,
)
from tierscope.store._host import cgroup_version, host_facts
from tierscope.store._import import write_import
from tierscope.store._run import Run, RunWriter, is_run, read_run, run_status, scan_table
from tierscope.store._schema import SCHEMAS, TABLES

__all__ = [
    "SCHEMAS",
    "TABLES",
    "Run",
    "RunWriter",
    "cgroup_version",
    "host_facts",
    "is_run",
    "read_analysis",
    "read_calibration",
    "read_run",
    "run_status",
    "scan_table",
    "write_analysis",
    "write_import",
    "write_report",
]
