"""Starting, tracking and always stopping the processes of a run.

Design decisions:

* Every server is started in its **own session** (process group), and inside its node's cgroup
  when there is one, so stopping it stops everything it forked (nginx workers, PostgreSQL
  backends) — by process group and by cgroup membership.
* A run never leaves processes behind, even when the runner is SIGKILLed: a small **reaper**
  process (module ``tierscope.experiment._reaper``) is started first, in a session of its own,
  holding the read end of a pipe. It learns what to clean (process groups, cgroups, temporary
  folders) from a state file the supervisor appends to *before* each resource is created; when
  the pipe closes — normal end, crash or kill — it cleans whatever is still there. On a normal
  end the supervisor has already stopped everything and the reaper finds nothing to do.
* **Nothing of the caller's working directory runs in a tier.** Python processes start as
  ``python -I`` (:func:`python_argv`: no current directory on the import path, no ``PYTHON*``
  variables) with the runner's own import path less the folder Python added for the caller, and
  every process runs in the run's scratch folder; a ``json.py`` where ``tierscope`` was started
  is never imported by a tier that runs as root.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from tierscope.errors import TierscopeError
from tierscope.experiment._reaper import kill_group, start_time
from tierscope.experiment.cgroups import Hierarchy, NodeCgroup
from tierscope.experiment.leftovers import RunClaim

#: ``python -I -c`` code: set the import path from argv[1] (JSON), run the module in argv[2] as
#: ``__main__`` with the remaining arguments.
_BOOT = (
    "import json,runpy,sys;sys.argv.pop(0);sys.path[:]=json.loads(sys.argv.pop(0));"
    "runpy.run_module(sys.argv[0],run_name='__main__',alter_sys=True)"
)


def import_path() -> list[str]:
    """This process's import path less the working directory (``''`` or its path, which Python
    puts first for ``-m``, ``-c`` and the REPL): where a tier may import from."""
    try:
        cwd = {os.getcwd(), os.path.realpath(os.getcwd())}
    except OSError:
        cwd = set()
    return [
        p
        for p in sys.path
        if p and os.path.isabs(p) and p not in cwd and os.path.realpath(p) not in cwd
    ]


def free_ports(host: str, n: int) -> list[int]:
    """``n`` different free ports of ``host`` (held together while they are chosen), for a
    server this run starts."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]


def python_argv(module: str, *args: str) -> list[str]:
    """``python -m module args`` isolated (``-I``) but importing what the runner imports."""
    return [sys.executable, "-I", "-c", _BOOT, json.dumps(import_path()), module, *args]


class StartError(TierscopeError):
    """A server of the system under test did not start; the message quotes its log."""


def _tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


class Supervisor:
    """Owns every process and cgroup of a run and the reaper that guards them."""

    def __init__(self, workdir: Path, claim: RunClaim | None = None) -> None:
        self.workdir = workdir.resolve()
        self.claim = claim
        self.state_file = self.workdir / "reaper.state"
        self.procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        #: When each started process began (its group is killed only while it is the run's).
        self.starts: dict[int, int | None] = {}
        self._reaper: subprocess.Popen[bytes] | None = None
        self._pipe: IO[bytes] | None = None

    # ---- reaper ----------------------------------------------------------------------------
    def start_reaper(self, *, extra: dict[str, Any] | None = None) -> None:
        self._note({"dir": str(self.workdir), **(extra or {})})
        keep: tuple[int, ...] = ()
        if self.claim is not None and self.claim.fd is not None:
            # The reaper shares the run's lock: the run counts as alive until it is done.
            self._note({"lock": str(self.claim.path)})
            keep = (self.claim.fd,)
        self._reaper = subprocess.Popen(
            python_argv("tierscope.experiment._reaper", str(self.state_file)),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
            pass_fds=keep,
            cwd="/",
        )
        self._pipe = self._reaper.stdin

    def _note(self, entry: dict[str, Any]) -> None:
        with open(self.state_file, "a") as fh:
            fh.write(json.dumps(entry) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def note_cgroup(self, node: NodeCgroup) -> None:
        self._note({"cgroups": [str(p) for p in node.paths.values()]})

    def server_cgroup(self, hierarchy: Hierarchy | None, name: str, *, cpu: float | None = None,
                      memory: int | None = None, cpuset: str | None = None,
                      ) -> NodeCgroup | None:  # fmt: skip
        """A server's own cgroup ``name`` under ``hierarchy`` (None without one), noted for
        the reaper, with its limits set (``cpu`` None: uncapped for now)."""
        if hierarchy is None:
            return None
        group = hierarchy.node(name)
        self.note_cgroup(group)
        group.set_cpu(cpu)
        if memory:
            group.set_memory(memory)
        if cpuset:
            group.set_cpuset(cpuset)
        return group

    def note_paths(self, *paths: Path) -> None:
        self._note({"cgroups": [str(p) for p in paths]})

    # ---- processes -------------------------------------------------------------------------
    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        node: NodeCgroup | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in its own session (and in ``node``) in ``cwd`` (default: the run's
        scratch folder); output goes to ``name.log``."""
        log = self.workdir / f"{name}.log"
        cmd = node.wrap(list(argv)) if node is not None else list(argv)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                env=env,
                cwd=cwd if cwd is not None else self.workdir,
            )
        self.starts[proc.pid] = start_time(proc.pid)
        self._note({"pgid": proc.pid, "start": self.starts[proc.pid]})
        self.procs.append((name, proc, log))
        return proc

    def spawn_task(self, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start a process that ends by itself (a load worker): the reaper stops its group if
        the run dies, but :meth:`check_alive` does not count its end as a failure and the
        caller waits for it."""
        proc = self.spawn(name, argv)
        self.procs = [p for p in self.procs if p[1] is not proc]
        return proc

    def run_once(self, name: str, argv: Sequence[str], timeout_s: float = 120.0) -> None:
        """Run a set-up command to completion (not a server); StartError with its log on failure."""
        proc = self.spawn_task(name, argv)
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            code = None
        if code != 0:
            log = self.workdir / f"{name}.log"
            raise StartError(f"{name} failed ({code}); its log ({log}):\n{_tail(log)}")

    def wait_ready(
        self, name: str, proc: subprocess.Popen[bytes], ready: Path, timeout_s: float = 20.0
    ) -> dict[str, Any]:
        """Wait for a process's ready file; StartError with its log if it dies or times out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready.is_file():
                with contextlib.suppress(ValueError):
                    return dict(json.loads(ready.read_text()))
            if proc.poll() is not None:
                break
            time.sleep(0.01)
        log = self.workdir / f"{name}.log"
        why = "exited" if proc.poll() is not None else f"not ready after {timeout_s:g} s"
        raise StartError(f"{name} {why}; its log ({log}):\n{_tail(log)}")

    def check_alive(self) -> None:
        """StartError naming the first server that died during the run."""
        for name, proc, log in self.procs:
            if proc.poll() is not None:
                raise StartError(f"{name} exited with status {proc.returncode}:\n{_tail(log)}")

    def stop_all(self, timeout_s: float = 5.0) -> None:
        """SIGTERM every process group, then SIGKILL what is left."""
        self._stop(self.procs, timeout_s)
        self.procs.clear()

    def stop_groups(self, pgids: Sequence[int], timeout_s: float = 5.0) -> None:
        """Stop the processes started with these process group ids (as :meth:`stop_all`)."""
        chosen = [p for p in self.procs if p[1].pid in set(pgids)]
        self._stop(chosen, timeout_s)
        self.procs = [p for p in self.procs if p[1].pid not in set(pgids)]

    def _stop(
        self, procs: list[tuple[str, subprocess.Popen[bytes], Path]], timeout_s: float
    ) -> None:
        for _, proc, _ in procs:
            if proc.poll() is None:
                kill_group(proc.pid, self.starts.get(proc.pid), signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for _, proc, _ in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for _, proc, _ in procs:  # what is left of each group (a reused id is left alone)
            kill_group(proc.pid, self.starts.get(proc.pid), signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(1.0)

    def close(self) -> None:
        """Normal end: everything is stopped; let the reaper check and exit."""
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                self._pipe.close()
            self._pipe = None
        if self._reaper is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._reaper.wait(10.0)
            self._reaper = None
