"""The reaper: cleans up after a run whose runner is gone (see :mod:`.processes`).

Started with its stdin on a pipe from the runner and in its own session; it blocks until the
pipe closes, then reads the state file (one JSON object per line: ``{"pgid": N}``,
``{"cgroups": [paths]}``, ``{"dir": path}``, ``{"lock": path}``) and kills, removes and deletes
whatever is still there, the run's lock file last (it holds the run's lock, see
:mod:`.leftovers`, until it exits). Everything it does is idempotent, so a normal end (nothing
left) costs nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path


def _kill_pgid(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGCONT)
        os.killpg(pgid, signal.SIGKILL)


def _empty_cgroup(path: Path) -> None:
    procs = path / "cgroup.procs"
    for _ in range(100):
        try:
            pids = [int(x) for x in procs.read_text().split()]
        except OSError:
            break
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    for _ in range(50):
        try:
            path.rmdir()
            break
        except FileNotFoundError:
            break
        except OSError:
            time.sleep(0.02)


def clean(state_file: Path) -> None:
    try:
        lines = state_file.read_text().splitlines()
    except OSError:
        return
    entries = []
    for line in lines:
        with contextlib.suppress(ValueError):
            entries.append(json.loads(line))
    for e in entries:
        if "pgid" in e:
            _kill_pgid(int(e["pgid"]))
    cgroups = [Path(p) for e in entries for p in e.get("cgroups", [])]
    # Children before parents.
    for path in sorted(cgroups, key=lambda p: len(p.parts), reverse=True):
        _empty_cgroup(path)
    for e in entries:
        if "dir" in e and e.get("remove", True):
            shutil.rmtree(e["dir"], ignore_errors=True)
    for e in entries:
        if "lock" in e:
            with contextlib.suppress(OSError):
                os.unlink(e["lock"])


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the runner, not for us
    state = Path(sys.argv[1])
    with contextlib.suppress(OSError):
        while sys.stdin.buffer.read(4096):
            pass
    clean(state)


if __name__ == "__main__":
    main()
