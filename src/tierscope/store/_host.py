"""Facts about the machine a run was made on, recorded in ``run.json``.

Design decision: only facts that change how numbers should be read (cores, kernel, cgroup
version for CPU quotas and throttling) and that can be read without privileges or extra
packages; anything that cannot be determined is ``None`` rather than a guess.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def cgroup_version(root: Path = Path("/sys/fs/cgroup")) -> str | None:
    """``"v2"`` (unified hierarchy), ``"v1"`` (legacy or hybrid) or ``None`` (no cgroups)."""
    try:
        if (root / "cgroup.controllers").is_file():
            return "v2"
        if root.is_dir() and any(
            (root / c).is_dir() for c in ("cpu", "cpuacct", "cpu,cpuacct", "memory", "pids")
        ):
            return "v1"
    except OSError:
        return None
    return None


def host_facts() -> dict[str, Any]:
    """Cores, usable cores, kernel, cgroup version, OS, machine, Python and host name."""
    try:
        usable: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    return {
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "kernel": platform.release() or None,
        "cgroup": cgroup_version() if platform.system() == "Linux" else None,
        "os": platform.system() or None,
        "machine": platform.machine() or None,
        "python": platform.python_version(),
        "hostname": platform.node() or None,
    }
