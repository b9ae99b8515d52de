"""Node emulation with Linux control groups: one cgroup per tier replica, v1 or v2.

Design decisions:

* **Detect, do not assume.** The hierarchy is read from ``/proc/self/mountinfo`` (cgroup2
  mounts, or v1 mounts per controller, possibly co-mounted like ``cpu,cpuacct``); the run's
  cgroups are created *under the cgroups this process is in*, so limits an outer container or
  sandbox imposes still apply and nothing is written at the root.
* **One interface for both versions**: :class:`NodeCgroup` sets the CPU quota (v2 ``cpu.max``,
  v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``), cpuset and memory limit, adds processes, lists
  them, and opens the statistics files the monitor reads every tick (CPU usage, CFS throttling,
  memory, block I/O).
* **Processes join before they exec** (:meth:`NodeCgroup.wrap` prefixes a command with a shell
  that writes its own pid into ``cgroup.procs`` and then ``exec``\\ s), so every child a server
  forks (nginx workers, PostgreSQL backends) is in the node's cgroup from birth, and no
  ``preexec_fn`` runs in a threaded parent.
* Where cgroups cannot be written (no root, read-only mount), :func:`open_hierarchy` raises
  :class:`CgroupUnavailableError` with the reason; the runner then refuses specs that need
  quotas and falls back to /proc accounting for the others.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from tierscope.errors import TierscopeError

V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "blkio", "freezer")
CFS_PERIOD_US = 100_000


class CgroupUnavailableError(TierscopeError):
    """Control groups cannot be used here; the message says why and what to do."""


@dataclass(frozen=True)
class Mounts:
    """Where the hierarchies are: ``version`` "v1"/"v2"; v1 maps controller -> mount point."""

    version: str
    v2_root: Path | None = None
    v1: dict[str, Path] = field(default_factory=dict)


def detect_mounts(mountinfo: str | None = None) -> Mounts | None:
    """Parse ``/proc/self/mountinfo``; prefers v1 controllers when cpu is mounted as v1."""
    text = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
    v2: Path | None = None
    v1: dict[str, Path] = {}
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fstype, _source, options = [*right.split(" "), "", ""][:3]
        mount_point = Path(left.split(" ")[4])
        if fstype == "cgroup2":
            v2 = v2 or mount_point
        elif fstype == "cgroup":
            for opt in options.split(","):
                if opt in V1_CONTROLLERS:
                    v1.setdefault(opt, mount_point)
    if "cpu" in v1:
        return Mounts("v1", v1=v1)
    if v2 is not None and (v2 / "cgroup.controllers").is_file():
        controllers = (v2 / "cgroup.controllers").read_text().split()
        if "cpu" in controllers or not v1:
            return Mounts("v2", v2_root=v2)
    return Mounts("v1", v1=v1) if v1 else None


def _own_cgroups() -> dict[str, str]:
    """Controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _hid, controllers, path = line.split(":", 2)
        if controllers == "":
            out[""] = path
        for c in controllers.split(","):
            out[c] = path
    return out


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _read_kv(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            with contextlib.suppress(ValueError):
                out[k] = int(v)
    return out


class Hierarchy:
    """The run's parent cgroup(s) under this process's own; creates and removes node cgroups."""

    def __init__(self, mounts: Mounts, run_name: str) -> None:
        self.mounts = mounts
        self.version = mounts.version
        own = _own_cgroups()
        self.roots: dict[str, Path] = {}
        if mounts.version == "v2":
            assert mounts.v2_root is not None
            base = mounts.v2_root / own.get("", "/").lstrip("/")
            self.roots[""] = base / run_name
        else:
            for ctl, mount in mounts.v1.items():
                self.roots[ctl] = mount / own.get(ctl, "/").lstrip("/") / run_name
        self.nodes: list[NodeCgroup] = []

    def create(self) -> None:
        try:
            for ctl, root in self.roots.items():
                root.mkdir(parents=False, exist_ok=True)
                if ctl == "cpuset":
                    _inherit_cpuset(root)
            if self.version == "v2":
                self._enable_v2_controllers(self.roots[""].parent)
                self._enable_v2_controllers(self.roots[""])
        except OSError as exc:
            self.remove()
            raise CgroupUnavailableError(
                f"cannot create control groups under {next(iter(self.roots.values())).parent} "
                f"({exc.strerror or exc}); run as root, or remove cpu/cpuset/memory limits "
                "from the spec's tiers"
            ) from None

    @staticmethod
    def _enable_v2_controllers(path: Path) -> None:
        available = (path / "cgroup.controllers").read_text().split()
        wanted = [c for c in ("cpu", "cpuset", "memory", "io") if c in available]
        with contextlib.suppress(OSError):
            _write(path / "cgroup.subtree_control", " ".join("+" + c for c in wanted))
        if "cpu" not in (path / "cgroup.subtree_control").read_text().split():
            raise OSError(f"cannot enable the cpu controller in {path}/cgroup.subtree_control")

    def node(self, name: str) -> NodeCgroup:
        node = NodeCgroup(self, name)
        node.create()
        self.nodes.append(node)
        return node

    def forget(self, node: NodeCgroup) -> None:
        """A node destroyed on its own (a replica scaled away) is no longer the run's."""
        self.nodes = [n for n in self.nodes if n is not node]

    def remove(self) -> None:
        """Kill what is left in the node cgroups and remove them and the run's parent."""
        for node in reversed(self.nodes):
            node.destroy()
        self.nodes.clear()
        for root in self.roots.values():
            with contextlib.suppress(OSError):
                root.rmdir()


def _inherit_cpuset(path: Path) -> None:
    """v1 cpuset groups start empty; copy the parent's cpus and mems so tasks may join."""
    for f in ("cpuset.cpus", "cpuset.mems"):
        if not (path / f).read_text().strip():
            _write(path / f, (path.parent / f).read_text().strip())


class NodeCgroup:
    """The cgroup(s) of one node (tier replica)."""

    def __init__(self, hierarchy: Hierarchy, name: str) -> None:
        self.name = name
        self.paths = {ctl: root / name for ctl, root in hierarchy.roots.items()}
        self.cpu_quota_cores: float | None = None
        self._version = hierarchy.version
        #: Somebody else's cgroup (``system.kind: attach``): read, never changed or removed.
        self.adopted = False

    @classmethod
    def adopt(cls, path: str, mounts: Mounts | None = None) -> NodeCgroup:
        """The existing cgroup ``path`` (relative to the hierarchy's root, or absolute under
        its mount point), to be watched only; CgroupUnavailableError if it is not there or
        cannot be read."""
        mounts = mounts or detect_mounts()
        if mounts is None:
            raise CgroupUnavailableError("no cgroup hierarchy is mounted (neither v1 nor v2)")
        roots = {"": mounts.v2_root} if mounts.version == "v2" else dict(mounts.v1)
        rel = path
        for mount in roots.values():
            assert mount is not None
            if Path(path).is_relative_to(mount):
                rel = str(Path(path).relative_to(mount))
        paths = {ctl: root / rel.lstrip("/") for ctl, root in roots.items() if root}
        paths = {ctl: p for ctl, p in paths.items() if (p / "cgroup.procs").is_file()}
        main = paths.get("" if mounts.version == "v2" else "cpu")
        if main is None or (mounts.version == "v1" and "cpuacct" not in paths):
            raise CgroupUnavailableError(f"{path} is not a cgroup with CPU accounting here")
        try:
            (main / "cgroup.procs").read_text()
        except OSError as exc:
            raise CgroupUnavailableError(f"cannot read {main}/cgroup.procs ({exc})") from None
        self = cls.__new__(cls)
        self.name, self.paths, self._version, self.adopted = rel, paths, mounts.version, True
        self.cpu_quota_cores = self.read_cpu_quota()
        return self

    @property
    def version(self) -> str:
        return self._version

    def read_cpu_quota(self) -> float | None:
        """The CPU quota in cores as the cgroup has it (None: unlimited or unreadable)."""
        try:
            if self.version == "v2":
                quota, period = (self.paths[""] / "cpu.max").read_text().split()[:2]
            else:
                quota = (self.paths["cpu"] / "cpu.cfs_quota_us").read_text().strip()
                period = (self.paths["cpu"] / "cpu.cfs_period_us").read_text().strip()
            return None if quota in ("max", "-1") else int(quota) / int(period)
        except (OSError, ValueError, KeyError):
            return None

    def _path(self, ctl: str) -> Path | None:
        return self.paths.get("" if self.version == "v2" else ctl)

    def create(self) -> None:
        try:
            for ctl, path in self.paths.items():
                path.mkdir(exist_ok=True)
                if ctl == "cpuset":
                    _inherit_cpuset(path)
        except OSError as exc:
            raise CgroupUnavailableError(
                f"cannot create cgroup {self.name} ({exc.strerror or exc})"
            ) from None

    # ---- limits --------------------------------------------------------------------------------
    def set_cpu(self, cores: float | None) -> None:
        """CPU quota in cores (``None``: unlimited); can change while processes run."""
        self._own("change its CPU quota")
        self.cpu_quota_cores = cores
        quota = "max" if cores is None else str(max(1000, round(cores * CFS_PERIOD_US)))
        if self.version == "v2":
            _write(self.paths[""] / "cpu.max", f"{quota} {CFS_PERIOD_US}")
        else:
            path = self.paths["cpu"]
            _write(path / "cpu.cfs_period_us", str(CFS_PERIOD_US))
            _write(path / "cpu.cfs_quota_us", "-1" if quota == "max" else quota)

    def set_cpuset(self, cpus: str) -> None:
        path = self._path("cpuset")
        if path is None:
            raise CgroupUnavailableError("the cpuset controller is not available")
        _write(path / ("cpuset.cpus"), cpus)

    def set_memory(self, limit_bytes: int) -> None:
        path = self._path("memory")
        if path is None:
            raise CgroupUnavailableError("the memory controller is not available")
        name = "memory.max" if self.version == "v2" else "memory.limit_in_bytes"
        _write(path / name, str(limit_bytes))

    # ---- membership ----------------------------------------------------------------------------
    def procs_files(self) -> list[Path]:
        return [p / "cgroup.procs" for p in self.paths.values()]

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run by a shell that first moves itself into this node, then execs it."""
        joins = "; ".join(f"echo $$ > {shlex.quote(str(f))}" for f in self.procs_files())
        return ["/bin/sh", "-c", f'{joins}; exec "$@"', "tierscope-node", *argv]

    def add(self, pid: int) -> None:
        for f in self.procs_files():
            with contextlib.suppress(ProcessLookupError):
                _write(f, str(pid))

    def pids(self) -> list[int]:
        path = self._path("cpu") or next(iter(self.paths.values()))
        try:
            return [int(x) for x in (path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def tasks(self) -> list[int]:
        """Every thread of every process (v1 ``tasks``, v2 ``cgroup.threads``)."""
        path = self._path("cpu") or next(iter(self.paths.values()))
        name = "cgroup.threads" if self.version == "v2" else "tasks"
        try:
            return [int(x) for x in (path / name).read_text().split()]
        except OSError:
            return []

    # ---- statistics files (opened once by the monitor) ------------------------------------------
    def cpu_usage_file(self) -> tuple[Path, str]:
        """(file, kind): v1 ``cpuacct.usage`` in ns, v2 ``cpu.stat`` with ``usage_usec``."""
        if self.version == "v2":
            return self.paths[""] / "cpu.stat", "v2"
        return self.paths["cpuacct"] / "cpuacct.usage", "v1"

    def cpu_stat_file(self) -> Path:
        return (self.paths[""] if self.version == "v2" else self.paths["cpu"]) / "cpu.stat"

    def memory_file(self) -> Path | None:
        path = self._path("memory")
        if path is None:
            return None
        return path / ("memory.current" if self.version == "v2" else "memory.usage_in_bytes")

    def io_file(self) -> tuple[Path, str] | None:
        if self.version == "v2":
            return self.paths[""] / "io.stat", "v2"
        path = self.paths.get("blkio")
        return (path / "blkio.throttle.io_service_bytes", "v1") if path else None

    def throttling(self) -> dict[str, int]:
        return _read_kv(self.cpu_stat_file())

    # ---- teardown ------------------------------------------------------------------------------
    def _own(self, what: str) -> None:
        if self.adopted:
            raise CgroupUnavailableError(f"{self.name} is not tierscope's cgroup: cannot {what}")

    def kill_all(self, sig: int = signal.SIGKILL) -> None:
        self._own("kill its processes")
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def destroy(self, timeout_s: float = 5.0) -> None:
        """Kill every process left in the node and remove its cgroups (an adopted cgroup is
        left as it is)."""
        if self.adopted:
            return
        deadline = time.monotonic() + timeout_s
        while self.pids() and time.monotonic() < deadline:
            self.kill_all()
            # A stopped (stalled) process must be continued to die promptly.
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGCONT)
            time.sleep(0.02)
        for path in self.paths.values():
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


#: Directory names of a container's cgroup: Docker (systemd and cgroupfs drivers), Podman,
#: CRI-O and containerd, followed by the container id.
CONTAINER_DIRS = re.compile(
    r"^(?:docker-|libpod-|crio-|cri-containerd-)?([0-9a-f]{12,64})(?:\.scope)?$"
)


def container_cgroup(container: str, mounts: Mounts | None = None, max_depth: int = 8) -> str:
    """The cgroup path (relative to the hierarchy's root) of the container whose id starts
    with ``container`` (at least 4 hex digits); CgroupUnavailableError if none or several."""
    mounts = mounts or detect_mounts()
    root = None if mounts is None else (mounts.v2_root or mounts.v1.get("cpu"))
    if root is None:
        raise CgroupUnavailableError("no cgroup hierarchy is mounted (neither v1 nor v2)")
    wanted = container.lower()
    found: list[Path] = []
    for here, dirs, _ in os.walk(root):
        depth = len(Path(here).relative_to(root).parts)
        for d in dirs:
            m = CONTAINER_DIRS.match(d)
            if m and m.group(1).startswith(wanted):
                found.append(Path(here) / d)
        if depth >= max_depth:
            dirs.clear()
    found = [p for p in found if not any(q != p and p.is_relative_to(q) for q in found)]
    if len(found) != 1:
        what = "no" if not found else f"{len(found)} ({', '.join(str(p) for p in found[:3])})"
        raise CgroupUnavailableError(f"{what} container cgroups under {root} match {container!r}")
    return "/" + str(found[0].relative_to(root))


def open_hierarchy(run_name: str) -> Hierarchy:
    """The run's cgroup parent, created; :class:`CgroupUnavailableError` if that is impossible."""
    try:
        mounts = detect_mounts()
    except OSError as exc:
        raise CgroupUnavailableError(f"cannot read /proc/self/mountinfo ({exc})") from None
    if mounts is None:
        raise CgroupUnavailableError("no cgroup hierarchy is mounted (neither v1 nor v2)")
    h = Hierarchy(mounts, run_name)
    h.create()
    return h
