"""``tierscope import otlp``: OpenTelemetry traces in OTLP, as JSON (the collector's file
exporter: one ``TracesData`` object a line; or one document, as OTLP/HTTP JSON sends it) or as
protobuf (``TracesData`` / ``ExportTraceServiceRequest`` bytes, as OTLP/HTTP sends them).

Each span becomes a row of ``requests``: its component is the resource's ``service.name``, its
node ``service.instance.id`` (else ``host.name``, else the component), its request the trace,
its visit the span and its parent the parent span; ``exclusive`` is the span's time less the
time any of its child spans was running (children in parallel counted once), so a component's
own work adds up without counting its callees'. A trace's root span also gives its end-to-end
row (tier ``client``). The call graph comes from the parents (a call where a span's parent is
in another component; ``p`` the share of the caller's spans that make it, ``times`` how many
per span that makes one; ``parallel`` where calls of one span mostly overlap), unless
``--graph`` gives one. Per component and second: ``throughput_s``, ``errors_s`` (status code
error), ``rt_mean``, ``rt_p95`` and ``exclusive_mean`` (seconds).

Design decision: the ``opentelemetry-proto`` classes parse both encodings (OTLP JSON differs
from protobuf's JSON mapping only in writing ids in hex, turned into base64 first), so every
field is type-checked by the protocol's own schema.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tierscope.errors import InputError, clip
from tierscope.ingest._client import CLIENT, per_second
from tierscope.ingest._files import Read
from tierscope.spec.graph import Call, Component, Graph

_IDS = ("traceId", "spanId", "parentSpanId")
_SPAN_SCHEMA = {
    "tier": pl.String, "node": pl.String, "request_id": pl.String, "visit": pl.String,
    "parent": pl.String, "start_ns": pl.UInt64, "end_ns": pl.UInt64, "interaction": pl.String,
    "status": pl.String,
}  # fmt: skip
ERROR = 2  # Status.STATUS_CODE_ERROR
#: Calls of one span that overlap in at least this share of spans: the component calls in
#: parallel.
PARALLEL_SHARE = 0.5


def read_otlp(paths: Sequence[Path]) -> Read:
    """OTLP traces files, read together: a trace's spans may come in several files (an
    exporter sends a batch at a time). See the module's docstring."""
    rows: list[dict[str, Any]] = []
    for path in paths:
        src = str(path)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise InputError("file", src, f"a readable file ({exc.strerror})",
                             source=src) from None  # fmt: skip
        if raw.lstrip()[:1] in (b"{", b""):
            for where, doc in _json_docs(raw, src):
                _spans(_parse_json(doc, where), rows)
        else:
            _spans(_parse_binary(raw, src), rows)
    src = str(paths[0]) if len(paths) == 1 else f"{paths[0]} (and {len(paths) - 1} more)"
    if not rows:
        raise InputError("resourceSpans", None, "at least one span", source=src)
    spans = pl.DataFrame(rows, schema=_SPAN_SCHEMA).with_columns(
        (pl.col("start_ns") / 1e9).alias("start"), (pl.col("end_ns") / 1e9).alias("end")
    )
    bad = spans.filter(pl.col("end_ns") < pl.col("start_ns"))
    if bad.height:
        raise InputError("endTimeUnixNano", bad["end_ns"][0],
                         f"a time at or after the span's start (span {bad['visit'][0]})",
                         source=src)  # fmt: skip
    dup = spans.filter(pl.struct("request_id", "visit").is_duplicated())
    if dup.height:
        raise InputError("spanId", dup["visit"][0], "span ids that appear once in a trace",
                         source=src)  # fmt: skip
    spans = _exclusive(spans).drop("start_ns", "end_ns")
    requests = pl.concat([spans, _end_to_end(spans)], how="diagonal_relaxed").with_columns(
        pl.lit(None, pl.Float64).alias("level"), pl.lit(0, pl.Int64).alias("rep")
    )
    calls, said = _graph(spans)
    services = spans["tier"].n_unique()
    notes = [
        f"{len(paths)} files: {spans.height} spans of {spans['request_id'].n_unique()} traces in "
        f"{services} components; {said}"
    ]
    metrics = per_second(spans, pl.col("exclusive").mean().alias("exclusive_mean"))
    return Read(metrics, True, notes, requests=requests, calls=calls)


def _json_docs(raw: bytes, src: str) -> list[tuple[str, Any]]:
    """The JSON documents of a file: the whole file, else one a line (NDJSON)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError("file", src, f"UTF-8 JSON ({exc.reason})", source=src) from None
    try:
        return [(src, json.loads(text))]
    except (ValueError, RecursionError):
        pass
    docs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{src}, line {number}"
        try:
            docs.append((where, json.loads(line)))
        except (ValueError, RecursionError) as exc:
            raise InputError("line", clip(line, 60), f"a JSON object ({clip(str(exc), 80)})",
                             source=where) from None  # fmt: skip
    return docs


def _parse_json(doc: Any, where: str) -> Any:
    from google.protobuf import json_format
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

    if not isinstance(doc, dict) or ("resourceSpans" not in doc and "resource_spans" not in doc):
        raise InputError("resourceSpans", None, "OTLP traces (an object with resourceSpans)",
                         source=where)  # fmt: skip
    _ids_to_base64(doc, where)
    try:
        return json_format.ParseDict(doc, TracesData(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise InputError("resourceSpans", None, f"OTLP traces ({clip(str(exc), 160)})",
                         source=where) from None  # fmt: skip


def _ids_to_base64(node: Any, where: str) -> None:
    """OTLP JSON writes trace and span ids in hex; protobuf's JSON mapping wants base64."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key in _IDS and isinstance(value, str):
                    try:
                        item[key] = base64.b64encode(bytes.fromhex(value)).decode()
                    except ValueError:
                        raise InputError(key, clip(value, 40), "an id in hex",
                                         source=where) from None  # fmt: skip
                else:
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)


def _parse_binary(raw: bytes, src: str) -> Any:
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

    try:
        return TracesData.FromString(raw)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise InputError("file", src, f"OTLP JSON or protobuf traces ({clip(str(exc), 120)})",
                         source=src) from None  # fmt: skip


def _spans(data: Any, rows: list[dict[str, Any]]) -> None:
    for resource_spans in data.resource_spans:
        attrs = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
        service = attrs.get("service.name") or "unknown_service"
        node = attrs.get("service.instance.id") or attrs.get("host.name") or service
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                rows.append({
                    "tier": service, "node": node, "request_id": span.trace_id.hex(),
                    "visit": span.span_id.hex(), "parent": span.parent_span_id.hex() or None,
                    "start_ns": span.start_time_unix_nano, "end_ns": span.end_time_unix_nano,
                    "interaction": span.name,
                    "status": "error" if span.status.code == ERROR else "ok",
                })  # fmt: skip


def _exclusive(spans: pl.DataFrame) -> pl.DataFrame:
    """Each span with ``exclusive`` (seconds): its time less the union of its children's
    (clipped to it), in whole nanoseconds until the end."""
    a, b = pl.col("start_ns").cast(pl.Int64), pl.col("end_ns").cast(pl.Int64)
    own = spans.select("request_id", "visit", a.alias("a"), b.alias("b"))
    children = (
        spans.filter(pl.col("parent").is_not_null())
        .select("request_id", pl.col("parent").alias("visit"), a.alias("cs"), b.alias("ce"))
        .join(own, on=["request_id", "visit"])
        .select(
            "request_id",
            "visit",
            pl.max_horizontal("cs", "a").alias("cs"),
            pl.min_horizontal("ce", "b").alias("ce"),
        )
        .filter(pl.col("ce") > pl.col("cs"))
        .sort("request_id", "visit", "cs")
        .with_columns(pl.col("ce").cum_max().shift(1).over("request_id", "visit").alias("reach"))
        .with_columns(
            (pl.col("cs") > pl.col("reach"))
            .fill_null(True)
            .cum_sum()
            .over("request_id", "visit")
            .alias("g")
        )
        .group_by("request_id", "visit", "g")
        .agg((pl.col("ce").max() - pl.col("cs").min()).alias("held"))
        .group_by("request_id", "visit")
        .agg(pl.col("held").sum())
    )
    return (
        spans.join(children, on=["request_id", "visit"], how="left")
        .with_columns(((b - a - pl.col("held").fill_null(0)) / 1e9).alias("exclusive"))
        .drop("held")
    )


def _end_to_end(spans: pl.DataFrame) -> pl.DataFrame:
    """A ``client`` row per trace from its root spans (those whose parent is not in the data)."""
    return (
        _roots(spans)
        .group_by("request_id")
        .agg(
            pl.col("start").min(),
            pl.col("end").max(),
            pl.col("interaction").sort_by("start").first(),
            pl.when((pl.col("status") == "error").any())
            .then(pl.lit("error"))
            .otherwise(pl.lit("ok"))
            .alias("status"),
        )
        .with_columns(pl.lit(CLIENT).alias("tier"))
    )


def _roots(spans: pl.DataFrame) -> pl.DataFrame:
    """Spans without a parent, or whose parent is not in the data (a trace cut short)."""
    known = spans.select("request_id", pl.col("visit").alias("parent"))
    return spans.join(known, on=["request_id", "parent"], how="anti", nulls_equal=False)


def _graph(spans: pl.DataFrame) -> tuple[Graph | None, str]:
    """The calls the spans show (see the module's docstring), and what was found."""
    pairs = spans.join(
        spans.select("request_id", pl.col("visit").alias("parent"),
                     pl.col("tier").alias("caller"), pl.col("start").alias("ps")),
        on=["request_id", "parent"],
    ).filter(pl.col("caller") != pl.col("tier"))  # fmt: skip
    per_span = pairs.group_by("caller", "parent", "tier").agg(pl.len().alias("n"))
    spans_of = spans.group_by("tier").agg(pl.len().alias("visits"))
    stats = (
        per_span.group_by("caller", "tier")
        .agg(pl.len().alias("making"), pl.col("n").mean().alias("times"))
        .join(spans_of.rename({"tier": "caller"}), on="caller")
    )
    overlap = (
        pairs.sort("parent", "start")
        .with_columns(pl.col("end").cum_max().shift(1).over("parent").alias("reach"))
        .group_by("caller", "parent")
        .agg((pl.col("start") < pl.col("reach")).any().alias("overlap"), pl.len().alias("k"))
        .filter(pl.col("k") > 1)
        .group_by("caller")
        .agg(pl.col("overlap").mean().alias("share"))
    )
    parallel = {r[0] for r in overlap.iter_rows() if r[1] >= PARALLEL_SHARE}
    calls: dict[str, list[Call]] = {}
    for caller, callee, making, times, visits in stats.sort("caller", "tier").iter_rows():
        calls.setdefault(caller, []).append(
            Call(callee, p=min(1.0, making / visits), times=max(1, round(times)))
        )
    roots = _roots(spans)["tier"]
    entry = str(roots.mode().sort()[0]) if roots.len() else None
    names = spans["tier"].unique(maintain_order=True).to_list()
    components = [
        Component(n, calls=tuple(calls.get(n, ())), parallel=n in parallel) for n in names
    ]
    try:
        graph = Graph.build(components, entry)
    except ValueError as exc:
        return None, f"no call graph from the parents ({exc})"
    return graph, f"call graph from the span parents: {len(graph.edges())} calls"


__all__ = ["read_otlp"]
