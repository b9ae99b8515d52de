"""``tierscope import k6``: k6 results, as ``k6 run --out json=FILE`` writes them (NDJSON: a
``Metric`` line declaring each metric, then a ``Point`` line per sample), or the end-of-test
summary (``--summary-export=FILE``, or ``handleSummary``'s ``data`` as JSON).

From the NDJSON: each ``http_req_duration`` point is a request (its ``time`` is when the
response ended, its ``value`` the duration in ms, tag ``name`` (else ``url``) its name; it
failed when tag ``expected_response`` is ``false``, else when tag ``status`` is 0 or 400 and
above), and the ``vus`` points are the active virtual users, so a ``stages`` ramp's plateaus
become load levels (:mod:`._client`). From a summary: one point, its level the most virtual
users (``vus_max``), its throughput ``http_reqs``' rate, its response times
``http_req_duration``'s (``avg``, ``med``, ``p(95)``, ``p(99)`` where the summary has them) and
its failures ``http_req_failed``'s share times the requests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from tierscope.errors import InputError, clip
from tierscope.ingest._client import client_tables
from tierscope.ingest._files import Read
from tierscope.ingest._time import parse_times

DURATION = "http_req_duration"


def read_k6(path: Path) -> Read:
    """A k6 NDJSON output or summary file (see the module's docstring)."""
    src = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("file", src, f"a readable text file ({clip(str(exc), 120)})",
                         source=src) from None  # fmt: skip
    lines = text.splitlines()
    first = next((ln for ln in lines if ln.strip()), "")
    if not first.strip():
        raise InputError("file", src, "k6 JSON output (the file is empty)", source=src)
    try:
        head = json.loads(first)
    except (ValueError, RecursionError):
        head = None
    if isinstance(head, dict) and head.get("type") in ("Metric", "Point"):
        return _points_file(lines, path)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        expected = f"k6 JSON: NDJSON output or a summary ({clip(str(exc), 120)})"
        raise InputError("file", src, expected, source=src) from None
    return _summary(doc, path)


def _points_file(lines: list[str], path: Path) -> Read:
    src = str(path)
    req: dict[str, list[Any]] = {"time": [], "ms": [], "ok": [], "label": [], "line": []}
    vus: dict[str, list[Any]] = {"time": [], "users": [], "line": []}
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{src}, line {number}"
        try:
            item = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise InputError("line", clip(line, 60), f"a JSON object ({clip(str(exc), 80)})",
                             source=where) from None  # fmt: skip
        if not isinstance(item, dict) or item.get("type") not in ("Metric", "Point"):
            raise InputError("type", clip(line, 60), "a k6 Metric or Point line", source=where)
        metric = item.get("metric")
        if not isinstance(metric, str):
            raise InputError("metric", metric, "a metric name", source=where)
        seen.add(metric)
        if item["type"] != "Point" or metric not in (DURATION, "vus"):
            continue
        data = item.get("data")
        if not isinstance(data, dict):
            raise InputError("data", None, "an object with time, value and tags", source=where)
        value, when = data.get("value"), data.get("time")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
            raise InputError("data.value", value, "a number", source=where)
        if not isinstance(when, str):
            raise InputError("data.time", when, "an RFC 3339 time", source=where)
        if metric == "vus":
            vus["time"].append(when)
            vus["users"].append(float(value))
            vus["line"].append(number)
            continue
        if value < 0:
            raise InputError("data.value", value, "a duration >= 0 ms", source=where)
        tags = data.get("tags") or {}
        if not isinstance(tags, dict):
            raise InputError("data.tags", None, "an object", source=where)
        req["time"].append(when)
        req["ms"].append(float(value))
        req["ok"].append(_ok(tags))
        label = tags.get("name") or tags.get("url")
        req["label"].append(str(label) if label is not None else None)
        req["line"].append(number)
    if not req["time"]:
        raise InputError(DURATION, None, "http_req_duration points (the requests k6 made)",
                         source=src)  # fmt: skip
    end = _times(req["time"], req["line"], src)
    start = end - pl.Series(req["ms"]) / 1000.0
    before = (start < 0).arg_true()  # (a duration longer than the time since 1970)
    if before.len():
        i = int(before[0])
        raise InputError("data.value", req["ms"][i], "a duration that began after 1970",
                         source=f"{src}, line {req['line'][i]}")  # fmt: skip
    samples = pl.DataFrame(
        {"start": start, "end": end, "ok": req["ok"], "label": req["label"]},
        schema_overrides={"label": pl.String},
    ).with_columns(pl.lit(None, pl.Float64).alias("users"),
                   pl.lit(None, pl.String).alias("request_id"),
                   pl.lit(None, pl.String).alias("node"))  # fmt: skip
    users = None
    if vus["time"]:
        users = pl.DataFrame({"t": _times(vus["time"], vus["line"], src), "users": vus["users"]})
    tables, notes = client_tables(samples, users)
    notes = [f"{path.name}: k6 NDJSON, metrics {', '.join(sorted(seen))}", *notes]
    if users is None:
        notes.append(f"{path.name}: no vus points, so no load levels")
    return Read(tables["metrics"], True, notes, requests=tables["requests"],
                points=tables["points"])  # fmt: skip


def _ok(tags: dict[str, Any]) -> bool:
    expected = tags.get("expected_response")
    if expected is not None:
        return str(expected).lower() == "true"
    try:
        status = int(tags.get("status", 200))
    except (TypeError, ValueError):
        return False
    return 0 < status < 400


def _times(texts: list[str], lines: list[int], src: str) -> pl.Series:
    """k6's RFC 3339 times (nanoseconds and a zone) as epoch seconds."""
    series = pl.Series("time", texts).str.replace(r"(\.\d{6})\d+", "${1}")
    seconds = parse_times(series, source=src, column="data.time", lines=lines).seconds
    empty = seconds.is_null().arg_true()
    if empty.len():
        i = int(empty[0])
        raise InputError(
            "data.time", texts[i], "an RFC 3339 time", source=f"{src}, line {lines[i]}"
        )
    return seconds


def _summary(doc: object, path: Path) -> Read:
    src = str(path)
    metrics = doc.get("metrics") if isinstance(doc, dict) else None
    if not isinstance(metrics, dict):
        raise InputError("metrics", None, "a k6 summary (an object with 'metrics')", source=src)

    def stat(metric: str, *keys: str) -> float | None:
        entry = metrics.get(metric)
        if not isinstance(entry, dict):
            return None
        values = entry.get("values", entry)  # handleSummary nests them; --summary-export not
        for key in keys:
            v = values.get(key) if isinstance(values, dict) else None
            if v is not None:
                if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v or v < 0:
                    raise InputError(f"metrics.{metric}.{key}", v, "a number >= 0", source=src)
                return float(v)
        return None

    rate, count = stat("http_reqs", "rate"), stat("http_reqs", "count")
    if rate is None or count is None:
        raise InputError("metrics.http_reqs", None, "the requests' count and rate", source=src)
    level = stat("vus_max", "max", "value")
    if level is None:
        raise InputError("metrics.vus_max", None, "the most virtual users", source=src)
    failed = stat("http_req_failed", "rate", "value")
    ms = {k: stat(DURATION, *names) for k, names in
          (("rt_mean", ("avg",)), ("rt_p50", ("med", "p(50)")), ("rt_p95", ("p(95)",)),
           ("rt_p99", ("p(99)",)))}  # fmt: skip
    duration = count / rate if rate > 0 else None
    point = {
        "level": level, "rep": 0, "t_start": 0.0 if duration else None, "t_end": duration,
        "throughput": rate, "errors": None if failed is None else failed * count,
        **{k: None if v is None else v / 1000.0 for k, v in ms.items()},
    }  # fmt: skip
    notes = [
        f"{path.name}: a k6 summary: one point ({count:g} requests at up to {level:g} virtual "
        "users); no per-second data (use --out json for that)"
    ]
    points = pl.DataFrame([point], schema_overrides={"t_start": pl.Float64, "t_end": pl.Float64})
    return Read(pl.DataFrame(), False, notes, points=points)


__all__ = ["read_k6"]
