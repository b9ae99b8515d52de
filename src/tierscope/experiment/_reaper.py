"""The reaper: cleans up after a run whose runner is gone (see :mod:`.processes`).

Started with its stdin on a pipe from the runner and in its own session; it blocks until the
pipe closes, then reads the state file (one JSON object per line: ``{"pgid": N, "start": T}``,
``{"cgroups": [paths]}``, ``{"dir": path}``, ``{"lock": path}``) and kills, removes and deletes
whatever is still there, the run's lock file last (it holds the run's lock, see
:mod:`.leftovers`, until it exits). Everything it does is idempotent, so a normal end (nothing
left) costs nothing.

A process group id is a number the kernel hands out again once the group is gone (within
minutes on a busy host: pid_max is often 32768), so a group is killed only while it is still
the run's: its leader, if it still runs, started when the runner recorded (``start``, clock
ticks since boot, /proc/PID/stat field 22); a group whose leader exited keeps its id reserved
for its members, which are the run's.
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


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), None when it does not run."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the name may hold spaces


def kill_group(pgid: int, start: int | None, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` (after SIGCONT: a stopped group must wake to die) to the process group
    ``pgid`` if it is still the one whose leader started at ``start``."""
    leader = start_time(pgid)
    if start is not None and leader is not None and leader != start:
        return  # the id now names someone else's process (group)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGCONT)
        os.killpg(pgid, sig)


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
            kill_group(int(e["pgid"]), e.get("start"))
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
