"""The summary document of a load run (``tierscope load --json``) and the client-bottleneck verdict.

Design decision: the native engine hands over raw measurements (HDR quantiles, counts, CPU
samples); the judgement of whether the client itself limited the run lives here, in one place,
with its thresholds named, so the CLI, the store and the experiment runner all say the same thing.

The verdict is *bottleneck* when the generator demonstrably could not offer the configured load:
a worker thread busy for most of the steady window, timers firing late, many requests leaving
late, requests that could not be sent at all, or the generator using nearly every core it may
use. It is *near* when it came close (a thread mostly busy, timers somewhat late, a few late
requests, or a machine so busy that the generator competed for CPU).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from tierscope.load._frames import window_cpu

#: A worker thread busy for this fraction of the steady window is (close to) saturated.
THREAD_BUSY_BOTTLENECK = 0.90
THREAD_BUSY_NEAR = 0.70
#: 99th percentile of timer lateness (think-time ends, arrivals) in seconds.
LAG_P99_BOTTLENECK_S = 0.010
LAG_P99_NEAR_S = 0.002
#: Fraction of requests that left later than the late threshold.
LATE_BOTTLENECK = 0.05
LATE_NEAR = 0.01
#: The generator's CPU as a fraction of the cores it may use.
CORES_BOTTLENECK = 0.90
#: Whole-machine CPU busy fraction above which the generator competes for CPU.
MACHINE_BUSY_NEAR = 0.95

_QUANTILE_KEYS = ("mean", "min", "p50", "p90", "p95", "p99", "p999", "max")


def _num(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def quantiles(q: Mapping[str, Any], keys: Sequence[str] = _QUANTILE_KEYS) -> dict[str, Any]:
    """A native quantile dict in seconds, NaN as None."""
    return {k: _num(q.get(k)) for k in keys}


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def verdict(
    *,
    busiest_thread: float | None,
    cores_used: float | None,
    lag_p99: float | None,
    late: int,
    sent: int,
    not_sent: int,
    machine_busy: float | None,
    late_threshold_s: float,
    realtime: bool = False,
) -> tuple[bool, bool, list[str]]:
    """``(bottleneck, near, reasons)`` from the generator's self-measurements."""
    yes: list[str] = []
    near: list[str] = []
    if busiest_thread is not None:
        pct = f"{busiest_thread:.0%}"
        if busiest_thread >= THREAD_BUSY_BOTTLENECK:
            yes.append(f"a generator thread was busy {pct} of the steady window (add --threads)")
        elif busiest_thread >= THREAD_BUSY_NEAR:
            near.append(f"a generator thread was busy {pct} of the steady window")
    usable = _usable_cores()
    if cores_used is not None and cores_used >= CORES_BOTTLENECK * usable:
        yes.append(f"the generator used {cores_used:.2f} of the {usable} usable cores")
    if lag_p99 is not None:
        ms = f"{lag_p99 * 1e3:.2f} ms"
        if lag_p99 > LAG_P99_BOTTLENECK_S:
            yes.append(f"timers fired late: p99 lateness {ms}")
        elif lag_p99 > LAG_P99_NEAR_S:
            near.append(f"timers fired somewhat late: p99 lateness {ms}")
    if sent > 0 and late > 0:
        frac = late / sent
        what = (
            f"{frac:.1%} of requests left more than {late_threshold_s * 1e3:g} ms after their "
            "intended time (client or connection limit)"
        )
        if frac > LATE_BOTTLENECK:
            yes.append(what)
        elif frac > LATE_NEAR:
            near.append(what)
    if not_sent > 0:
        yes.append(
            f"{not_sent} requests could not be sent (outstanding-request bound reached, or "
            "no connection within the timeout)"
        )
    # A real-time generator is served first, so a busy machine does not delay it (its timer
    # lag says so directly); otherwise the competition is a warning of its own.
    if not realtime and machine_busy is not None and machine_busy >= MACHINE_BUSY_NEAR:
        near.append(
            f"the machine's CPUs were {machine_busy:.0%} busy: the generator competed for CPU"
        )
    return bool(yes), bool(yes or near), yes + near


def summary_doc(
    native: Mapping[str, Any],
    raw_samples: pl.DataFrame,
    *,
    times: tuple[float, float, float, float],
    stopped_at: float | None,
    facts: Mapping[str, Any],
    interactions: Sequence[str],
    late_threshold_s: float,
    failure: str | None,
) -> dict[str, Any]:
    """The ``--json`` document of a finished (or stopped) run."""
    _, steady_start, steady_end, _ = times
    end = steady_end if stopped_at is None else min(steady_end, stopped_at)
    duration = max(0.0, end - steady_start)
    all_ = native["all"]
    completed = sum((s or {}).get("completed", 0) for s in native["interactions"])
    per: dict[str, Any] = {}
    for name, s in zip(interactions, native["interactions"], strict=True):
        if s is None:
            continue
        per[name] = {
            "requests": s["requests"],
            "errors": s["errors"],
            "throughput": s["completed"] / duration if duration > 0 else None,
            "latency": quantiles(s["latency"]),
            "latency_uncorrected": quantiles(s["latency_uncorrected"]),
        }
    cores, busiest = window_cpu(raw_samples, steady_start, end)
    in_window = raw_samples.filter((pl.col("t") >= steady_start) & (pl.col("t") <= end + 1e-9))[
        "machine_busy"
    ].drop_nulls()
    machine_busy = float(in_window.mean()) if in_window.len() else None  # type: ignore[arg-type]
    lag = quantiles(native["timer_lag"], ("p50", "p99", "max"))
    send_lag = quantiles(native["send_lag"], ("p50", "p99", "max"))
    sent_in_window = int(native["send_lag"]["count"])
    not_sent = int(native["errors_by_class"].get("not_sent", 0))
    bottleneck, near, why = verdict(
        busiest_thread=busiest,
        cores_used=cores,
        lag_p99=lag["p99"],
        late=int(native["late"]),
        sent=sent_in_window,
        not_sent=not_sent,
        machine_busy=machine_busy,
        late_threshold_s=late_threshold_s,
        realtime=native["priority"] == "realtime",
    )
    requests = int(all_["requests"])
    errors = int(all_["errors"])
    doc: dict[str, Any] = {
        **facts,
        "steady": {"start": steady_start, "end": end, "duration_s": duration},
        "throughput": completed / duration if duration > 0 else None,
        "requests": requests,
        "errors": errors,
        "error_rate": errors / requests if requests else None,
        "errors_by_class": dict(native["errors_by_class"]),
        "latency": quantiles(all_["latency"]),
        "latency_uncorrected": quantiles(all_["latency_uncorrected"]),
        "send_lag": send_lag,
        "late": int(native["late"]),
        "late_threshold_s": late_threshold_s,
        "not_sent": not_sent,
        "client_cpu": cores,
        "client_cpu_max_thread": busiest,
        "lag": lag,
        "machine_cpu_busy": machine_busy,
        "client_priority": native["priority"],
        "client_bottleneck": bottleneck,
        "client_near_bottleneck": near,
        "client_bottleneck_why": why,
        "interactions": per,
        "bytes_received": int(all_["bytes"]),
        "totals": dict(native["totals"]),
        "partial": bool(native["stopped"]) or failure is not None,
    }
    if native["priority_demoted"]:
        doc["client_bottleneck_why"].append(
            "a generator thread used more than half a core and left the real-time class"
        )
        doc["client_near_bottleneck"] = True
    if facts.get("mode") == "partly-open":
        doc["sessions"] = {
            "started": native["sessions_started"],
            "rejected": native["sessions_rejected"],
            "rate": native["sessions_started"] / duration if duration > 0 else None,
        }
    if failure is not None:
        doc["failure"] = failure
    return doc
