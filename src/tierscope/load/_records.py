"""What a load driver's worker process shares with the others: its open schedule of intended
send times, the binary record files it appends to, and the flag SIGTERM sets to stop it.

Records are appended every :data:`FLUSH_EVERY_S` seconds, so whatever happens the parent keeps
what was measured up to then (:class:`tierscope.load._workers.Tail` reads them).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import numpy as np

FLUSH_EVERY_S = 0.25


def schedule(
    rate: float,
    ramp_up: float,
    steady: float,
    ramp_down: float,
    *,
    arrivals: str,
    seed: int,
    count: int | None = None,
) -> np.ndarray:
    """Intended send times (seconds from the start) of one worker: the rate ramps linearly
    from 0 over ``ramp_up``, holds for ``steady`` and falls to 0 over ``ramp_down``; or,
    with ``count``, that many messages at the constant ``rate``."""
    rng = np.random.default_rng(seed)
    if count is not None:
        marks = np.cumsum(rng.exponential(1.0, count)) if arrivals == "poisson" else (
            np.arange(count, dtype=float))  # fmt: skip
        return marks / rate
    # cumulative expected messages Λ(t) on a fine grid, inverted at the arrival marks
    total = ramp_up + steady + ramp_down
    t = np.linspace(0.0, total, max(2, int(total * 1000) + 1))
    lam = rate * np.minimum.reduce(
        [np.ones_like(t), t / ramp_up if ramp_up else np.ones_like(t),
         (total - t) / ramp_down if ramp_down else np.ones_like(t)]
    )  # fmt: skip
    cum = np.concatenate([[0.0], np.cumsum((lam[1:] + lam[:-1]) / 2 * np.diff(t))])
    expected = cum[-1]
    if arrivals == "poisson":
        n = rng.poisson(expected)
        marks = np.sort(rng.uniform(0.0, expected, n))  # Poisson given its count
    else:
        marks = np.arange(0.5, expected, 1.0)
    return np.interp(marks, cum, t)


class Appender:
    """Appends rows of a dtype to a file."""

    def __init__(self, path: Path) -> None:
        self.fh = open(path, "ab")  # noqa: SIM115 - closed in close()

    def write(self, rows: np.ndarray) -> None:
        if rows.size:
            rows.tofile(self.fh)
            self.fh.flush()

    def close(self) -> None:
        self.fh.close()


class StopFlag:
    def __init__(self) -> None:
        self.set = False

    def __bool__(self) -> bool:
        return self.set


def run_worker(argv: list[str], role: Any) -> int:
    """A worker's entry: its configuration file (``argv[0]``) handed to ``role(cfg)`` for its
    role; a failure leaves its traceback in ``<out>/<role>-<index>.error`` for the parent to
    report, and the worker exits with status 1."""
    cfg = json.loads(Path(argv[0]).read_text())
    try:
        role(cfg)
    except Exception:  # the parent reports why the worker failed
        import traceback

        error = Path(cfg["out"]) / f"{cfg['role']}-{cfg['index']}.error"
        error.write_text(traceback.format_exc())
        raise
    return 0


def stop_flag() -> StopFlag:
    """A flag SIGTERM sets (the worker then writes what it has and exits)."""
    flag = StopFlag()

    def handler(signum: int, frame: Any) -> None:
        flag.set = True

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return flag
