"""A run's claim on what it creates, and the removal of what killed runs left behind.

The reaper (:mod:`.processes`) cleans up after a runner that dies, but when the runner and its
reaper are killed together (a container or session killed whole, ``kill -9`` of everything),
nothing is left to remove the run's cgroups (``tierscope-RUN_ID`` under the runner's cgroup, one
per controller on v1), its scratch folder (``$TMPDIR/tierscope-RUN_ID-*``) and the network
emulator's iptables rules (commented with the run id). The next run does.

Design decision: **removal needs proof that the owner is gone.** Each run holds an exclusive
``flock`` on ``$TMPDIR/tierscope-RUN_ID.lock`` (holding its pid) from before it creates anything
until everything is removed; its reaper inherits the lock, so a run whose reaper is still
cleaning is not stale either. The kernel drops a lock with the last process that held it, so a
lock file that can be locked proves that the run is over, without trusting pids, which are
reused. Cgroups and folders of a run without a lock file (another ``TMPDIR``, an older
tierscope) are never touched: a live run's resources cannot be mistaken for leftovers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tierscope.experiment._reaper import _empty_cgroup
from tierscope.experiment.netem import remove_rules

LOCK_NAME = re.compile(r"tierscope-([0-9a-f]{8})\.lock")
#: How deep below a mount point run cgroups are looked for (the runner's own cgroup is nested).
MAX_CGROUP_DEPTH = 8


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}es" if word.endswith("s") else f"{n} {word}s"


@dataclass
class Removed:
    """What was removed for one killed run."""

    run_id: str
    pid: int | None
    cgroups: int = 0
    folders: int = 0
    processes: int = 0
    rules: int = 0
    failed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.cgroups or self.folders or self.processes or self.rules or self.failed)

    def message(self) -> str:
        parts = [_plural(self.cgroups, "stale cgroup")] if self.cgroups else []
        if self.folders:
            parts.append(_plural(self.folders, "scratch folder"))
        if self.rules:
            parts.append(_plural(self.rules, "network emulator rule"))
        done = "removed " + " and ".join(parts) if parts else ""
        if self.processes:
            done = f"stopped {_plural(self.processes, 'process')}" + (f", {done}" if done else "")
        who = f"a killed run ({self.run_id}, pid {self.pid})"
        text = f"{done} of {who}" if done else f"cleaned up after {who}"
        if self.failed:
            text += f"; could not remove {', '.join(self.failed)}"
        return text

    def detail(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "pid": self.pid,
            "cgroups": self.cgroups,
            "folders": self.folders,
            "processes": self.processes,
            "rules": self.rules,
            "failed": self.failed,
        }


class RunClaim:
    """The lock that marks a run as alive; :meth:`release` when everything is removed."""

    def __init__(self, run_id: str, path: Path, fd: int, removed: list[Removed]) -> None:
        self.run_id = run_id
        self.path = path
        self.fd: int | None = fd
        #: Leftovers of killed runs removed before this run started.
        self.removed = removed

    def __enter__(self) -> RunClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        if self.fd is None:
            return
        self.path.unlink(missing_ok=True)  # unlinked while still locked: no one sees it free
        os.close(self.fd)
        self.fd = None


def claim_run(
    run_id: str, *, tmp: Path | None = None, mounts: list[Path] | None = None
) -> RunClaim:
    """Remove the leftovers of killed runs, then take ``run_id``'s lock (before the run creates
    anything). ``tmp``: the scratch folder's parent (tempfile's); ``mounts``: cgroup mount
    points to search (those of this host)."""
    tmp = Path(tmp if tmp is not None else tempfile.gettempdir())
    removed = remove_leftovers(tmp=tmp, mounts=mounts)
    path = tmp / f"tierscope-{run_id}.lock"
    # Locked before it gets its name: a cleaner never finds this run's lock file unlocked.
    draft = tmp / f".tierscope-{run_id}.lock.{secrets.token_hex(4)}"
    fd = os.open(draft, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, json.dumps({"pid": os.getpid()}).encode())
        os.link(draft, path)
    except BaseException:
        os.close(fd)
        raise
    finally:
        draft.unlink(missing_ok=True)
    return RunClaim(run_id, path, fd, removed)


def remove_leftovers(*, tmp: Path | None = None, mounts: list[Path] | None = None) -> list[Removed]:
    """Remove the cgroups (killing what still runs in them) and scratch folders of every run
    whose lock file in ``tmp`` is free (its runner and reaper are gone); one :class:`Removed`
    per such run that left something."""
    tmp = Path(tmp if tmp is not None else tempfile.gettempdir())
    out: list[Removed] = []
    cgroups: dict[str, list[Path]] | None = None
    for entry in _entries(tmp):
        m = LOCK_NAME.fullmatch(entry.name)
        if m is None:
            continue
        fd = _lock_if_stale(entry)
        if fd is None:
            continue
        try:
            run_id = m.group(1)
            if cgroups is None:  # walked once, and only when some run is stale
                cgroups = _run_cgroups(mounts)
            result = _remove_run(run_id, _owner_pid(fd), tmp, cgroups.get(run_id, []))
            if result:
                out.append(result)
            if not result.failed:  # else the lock file stays, and the next run tries again
                Path(entry.path).unlink(missing_ok=True)
        finally:
            os.close(fd)
    return out


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError:
        return []


def _lock_if_stale(entry: os.DirEntry[str]) -> int | None:
    """An fd holding ``entry``'s lock if it is this user's lock file and nobody holds it."""
    try:
        fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise OSError("not our lock file")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: the run is alive
    except OSError:
        os.close(fd)
        return None
    return fd


def _owner_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        return int(json.loads(os.pread(fd, 256, 0))["pid"])
    return None


def _remove_run(run_id: str, pid: int | None, tmp: Path, cgroups: list[Path]) -> Removed:
    result = Removed(run_id, pid)
    folders = [
        Path(e.path)
        for e in _entries(tmp)
        if e.name.startswith(f"tierscope-{run_id}-")
        and e.is_dir(follow_symlinks=False)
        and e.stat(follow_symlinks=False).st_uid == os.geteuid()
    ]
    names: set[Path] = set()
    stopped: set[int] = set()
    for root in cgroups:
        nested = sorted(
            (Path(d) for d, _, _ in os.walk(root)), key=lambda p: len(p.parts), reverse=True
        )
        for path in nested:  # node cgroups before the run's
            with contextlib.suppress(OSError, ValueError):  # servers that outlived the run
                stopped.update(int(x) for x in (path / "cgroup.procs").read_text().split())
            _empty_cgroup(path)
            if path.exists():
                result.failed.append(str(path))
            else:
                names.add(path.relative_to(root))
    result.cgroups = len(names)
    result.processes = len(stopped)
    result.rules = remove_rules(run_id)  # the network emulator's, if the run had faults
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            result.failed.append(str(folder))
        else:
            result.folders += 1
    return result


def _run_cgroups(mounts: list[Path] | None) -> dict[str, list[Path]]:
    """run id -> its ``tierscope-RUN_ID`` cgroup folders, wherever they are below the mounts
    (the runner that made them may have been in another cgroup than this process)."""
    if mounts is None:
        mounts = _mount_points()
    name = re.compile(r"tierscope-([0-9a-f]{8})")
    found: dict[str, list[Path]] = {}
    for mount in mounts:
        level = [mount]
        for _ in range(MAX_CGROUP_DEPTH):
            deeper = []
            for folder in level:
                for e in _entries(folder):
                    if not e.is_dir(follow_symlinks=False):
                        continue
                    m = name.fullmatch(e.name)
                    if m:
                        found.setdefault(m.group(1), []).append(Path(e.path))
                    else:
                        deeper.append(Path(e.path))
            level = deeper
    return found


def _mount_points() -> list[Path]:
    from tierscope.experiment.cgroups import detect_mounts

    try:
        mounts = detect_mounts()
    except OSError:
        return []
    if mounts is None:
        return []
    if mounts.version == "v2":
        return [mounts.v2_root] if mounts.v2_root is not None else []
    return sorted(set(mounts.v1.values()))
