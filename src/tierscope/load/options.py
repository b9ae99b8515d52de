"""Command-line style options (``--users``, ``--think``, ``--rate`` ...) as a workload and a level.

Design decision: the options are turned into an override document and merged over the target's
workload with :func:`~tierscope.spec.workload.merge_workload`, then validated like a file, so a
flag and a file field can never mean different things and a bad flag gets the file's message.
"""

from __future__ import annotations

from typing import Any

from tierscope.errors import InputError
from tierscope.spec.workload import (
    Workload,
    load_workload,
    merge_workload,
    parse_workload,
)

#: Users of a plain URL target when no level is given (wrk's default connection count).
DEFAULT_URL_USERS = 10
THINK_DISTS = ("exp", "uniform", "constant", "none")
MODES = ("closed", "open", "partly-open")
LEVEL_FLAG = {"closed": "--users", "open": "--rate", "partly-open": "--session-rate"}


def is_url(target: str) -> bool:
    return target.startswith(("http://", "https://"))


def workload_from_options(
    target: str,
    *,
    users: int | None = None,
    think: float | None = None,
    think_dist: str | None = None,
    rate: float | None = None,
    session_rate: float | None = None,
    session_length: float | None = None,
    mode: str | None = None,
    mix: str | None = None,
    arrival: str | None = None,
) -> tuple[Workload, float | None, str]:
    """``(workload, level, source)`` for a URL or workload file and the given options."""
    if is_url(target):
        base: dict[str, Any] = {"interactions": [{"name": "get", "url": target}]}
        source = target
    else:
        base = load_workload(target).model_dump(mode="json", exclude_none=True)
        source = target
    override: dict[str, Any] = {}
    if mode is not None:
        if mode not in MODES:
            raise InputError("--mode", mode, "one of " + ", ".join(MODES))
        override["mode"] = mode
    elif is_url(target):
        override["mode"] = (
            "open" if rate is not None else "partly-open" if session_rate is not None else "closed"
        )
    if think_dist is not None and think_dist not in THINK_DISTS:
        raise InputError("--think-dist", think_dist, "one of " + ", ".join(THINK_DISTS))
    if think is not None or think_dist is not None:
        override["think_time"] = _think(think, think_dist or "exp")
    if mix is not None:
        override["mix"] = mix
    if arrival is not None:
        override["arrival"] = arrival
    if session_length is not None:
        if not session_length >= 1:
            raise InputError("--session-length", session_length, "a mean of >= 1 request")
        override["mixes"] = {"cli": {"end_probability": 1.0 / session_length}}
        override["mix"] = "cli"
    merged = merge_workload(base, override)
    if session_length is not None and not is_url(target):
        raise InputError("--session-length", session_length, "a URL target (a workload file "
                         "sets end_probability in its mixes)")  # fmt: skip
    workload = parse_workload(merged, source=source)
    level = _level(workload, users=users, rate=rate, session_rate=session_rate)
    if level is None and is_url(target) and workload.mode == "closed":
        level = float(DEFAULT_URL_USERS)
    return workload, level, source


def _think(mean: float | None, dist: str) -> dict[str, Any]:
    if dist == "none":
        return {"dist": "none"}
    if mean is None:
        raise InputError("--think", None, f"a mean think time for --think-dist {dist}")
    if not mean >= 0:
        raise InputError("--think", mean, "seconds >= 0")
    if mean == 0:
        return {"dist": "none"}
    if dist == "uniform":
        return {"dist": "uniform", "low": 0.0, "high": 2 * mean}
    return {"dist": dist, "mean": mean}


def _level(
    w: Workload, *, users: int | None, rate: float | None, session_rate: float | None
) -> float | None:
    given = {"--users": users, "--rate": rate, "--session-rate": session_rate}
    wanted = LEVEL_FLAG[w.mode]
    for flag, value in given.items():
        if value is not None and flag != wanted:
            raise InputError(flag, value, f"{wanted} (the workload is {w.mode})")
    value = given[wanted]
    if value is None:
        return None
    if not value > 0 or value == float("inf"):
        raise InputError(wanted, value, "a number > 0 (no load measures nothing)")
    return float(value)
