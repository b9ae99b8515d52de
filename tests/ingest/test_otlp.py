"""``tierscope import otlp``: traces written by the real OpenTelemetry SDK and its OTLP/HTTP
exporter (posted to a loopback receiver the test runs), with span times set by the test, so
the exclusive times, the end-to-end rows and the call graph are known exactly."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierscope import ingest
from tierscope.errors import InputError
from tierscope.store import read_run

T0 = 1_764_000_000 * 10**9  # ns
MS = 10**6
TRACES = 40


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[str, list[Path]]]:
    """An OTLP/HTTP endpoint on loopback that keeps each request body as a file."""
    bodies: list[Path] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            path = tmp_path / f"export-{len(bodies)}.pb"
            path.write_bytes(body)
            bodies.append(path)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", bodies
    finally:
        server.shutdown()
        server.server_close()


def _export(url: str, traces: int = TRACES, start_s: float = 0.0, slow_db_ms: int = 0,
            every_ms: int = 200) -> None:  # fmt: skip
    """``traces`` traces through three services, times set here: frontend 0-100 ms calls cart
    10-60 ms, which calls db twice (20-30 and 35-45 ms, one after the other); every second
    trace frontend also calls payment 70-90 ms (status error in one trace of four).
    ``slow_db_ms``: the second db call takes that much longer (cart and frontend wait for it)
    in the second half of the traces."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import Status, StatusCode, set_span_in_context

    providers, tracers = [], {}
    for name in ("frontend", "cart", "db", "payment"):
        provider = TracerProvider(resource=Resource.create({"service.name": name}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=url)))
        providers.append(provider)
        tracers[name] = provider.get_tracer("tierscope-test")

    def span(service: str, name: str, a: int, b: int, parent: object = None,
             error: bool = False) -> object:  # fmt: skip
        ctx = None if parent is None else set_span_in_context(parent)  # type: ignore[arg-type]
        s = tracers[service].start_span(name, context=ctx, start_time=a)
        if error:
            s.set_status(Status(StatusCode.ERROR))
        s.end(end_time=b)
        return s

    for i in range(traces):
        t = T0 + int(start_s * 1e9) + i * every_ms * MS
        d = slow_db_ms * MS if i >= traces // 2 else 0
        root = tracers["frontend"].start_span("GET /buy", start_time=t)
        cart = tracers["cart"].start_span("cart.add", context=set_span_in_context(root),
                                          start_time=t + 10 * MS)  # fmt: skip
        span("db", "SELECT", t + 20 * MS, t + 30 * MS, cart)
        span("db", "UPDATE", t + 35 * MS, t + 45 * MS + d, cart)
        cart.end(end_time=t + 60 * MS + d)
        if i % 2 == 0:
            span("payment", "charge", t + 70 * MS + d, t + 90 * MS + d, root, error=i % 4 == 0)
        root.end(end_time=t + 100 * MS + d)
    for provider in providers:
        provider.shutdown()


def test_sdk_traces_give_spans_exclusive_times_end_to_end_rows_and_the_call_graph(
    receiver: tuple[str, list[Path]], tmp_path: Path
) -> None:
    url, bodies = receiver
    _export(url)
    assert bodies, "the SDK exported nothing"
    run_dir, notes = ingest.import_files("otlp", tmp_path / "run", bodies)
    run = read_run(run_dir)
    req = run.requests
    assert req is not None
    spans = req.filter(pl.col("tier") != "client")
    counts = dict(spans.group_by("tier").len().iter_rows())
    assert counts == {"frontend": TRACES, "cart": TRACES, "db": 2 * TRACES,
                      "payment": TRACES // 2}  # fmt: skip
    ms = spans.group_by("tier").agg(
        (pl.col("exclusive") * 1e3).mean().alias("exclusive"),
        ((pl.col("end") - pl.col("start")) * 1e3).mean().alias("rt"),
    )
    got = {r[0]: (r[1], r[2]) for r in ms.iter_rows()}
    # frontend 100 ms less cart 50 ms, less payment 20 ms in half the traces
    assert got["frontend"][0] == pytest.approx((50 + 30) / 2, abs=1e-6)
    assert got["cart"] == pytest.approx((30.0, 50.0), abs=1e-3)
    assert got["db"] == pytest.approx((10.0, 10.0), abs=1e-3)
    client = req.filter(pl.col("tier") == "client")
    assert client.height == TRACES
    assert ((client["end"] - client["start"]) * 1e3).to_list() == pytest.approx(
        [100.0] * TRACES, abs=1e-3
    )
    assert set(client["status"]) == {"ok"}  # the root spans' status: payment's errors are its own
    failed = spans.filter(pl.col("status") == "error")
    assert failed["tier"].to_list() == ["payment"] * (TRACES // 4)
    assert req["start"].min() == 0.0  # rebased to the first span
    graph = run.graph
    assert graph.entry == "frontend"
    calls = {(c.name, k.to): (k.p, k.times) for c in graph.components for k in c.calls}
    assert calls == {("frontend", "cart"): (1.0, 1), ("cart", "db"): (1.0, 2),
                     ("frontend", "payment"): (0.5, 1)}  # fmt: skip
    assert not graph["cart"].parallel  # its two db calls do not overlap
    metrics = run.metrics
    assert metrics is not None
    done = (
        metrics.filter(pl.col("metric") == "throughput_s")
        .group_by("tier")
        .agg(pl.col("value").sum())
    )
    assert dict(done.iter_rows())["db"] == pytest.approx(2 * TRACES)
    assert any("call graph from the span parents: 3 calls" in n for n in notes)


def test_the_same_traces_as_otlp_json_read_the_same(
    receiver: tuple[str, list[Path]], tmp_path: Path
) -> None:
    """OTLP JSON (as the collector's file exporter writes: a TracesData object a line, ids in
    hex) of the same export reads as the protobuf does."""
    from google.protobuf import json_format
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

    url, bodies = receiver
    _export(url)
    lines = []
    for body in bodies:
        doc = json_format.MessageToDict(TracesData.FromString(body.read_bytes()))
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for s in ss.get("spans", []):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in s:
                            s[key] = base64.b64decode(s[key]).hex()
        lines.append(json.dumps(doc))
    ndjson = tmp_path / "traces.jsonl"
    ndjson.write_text("\n".join(lines) + "\n")
    a = read_run(ingest.import_files("otlp", tmp_path / "pb", bodies)[0]).requests
    b = read_run(ingest.import_files("otlp", tmp_path / "json", [ndjson])[0]).requests
    assert a is not None and b is not None
    key = ["tier", "request_id", "visit"]
    assert (
        a.sort(key)
        .select(*key, "parent", "start", "end", "exclusive")
        .equals(b.sort(key).select(*key, "parent", "start", "end", "exclusive"))
    )


def test_a_slowed_callee_leads_the_suspects_and_explains_its_callers(
    receiver: tuple[str, list[Path]], tmp_path: Path
) -> None:
    """Normal traces, then an incident whose second half has db 40 ms slower: everyone's
    latency departs, db's own time first and most; the graph from the spans makes db the cause
    and its callers its victims."""
    from tierscope.analysis import analyze

    url, bodies = receiver
    _export(url, traces=300, every_ms=100)
    normal = list(bodies)
    _export(url, traces=300, start_s=60.0, every_ms=100, slow_db_ms=40)
    incident = bodies[len(normal) :]
    out, _ = ingest.import_files("otlp", tmp_path / "run", incident, baseline=normal)
    suspects = analyze(read_run(out))["suspects"]
    first = suspects[0]
    assert (first["tier"], first["resource"]) == ("db", "latency"), suspects[:3]
    victims = {s["tier"]: s["evidence"] for s in suspects[1:]}
    assert "explained by db" in victims["cart"] and "explained by db" in victims["frontend"]


#: The OTLP JSON example of the protocol's own repository (opentelemetry-proto,
#: examples/trace.json): one server span whose parent is not in the file.
SPEC_EXAMPLE = """{"resourceSpans": [{"resource": {"attributes": [{"key": "service.name",
 "value": {"stringValue": "my.service"}}]}, "scopeSpans": [{"scope": {"name": "my.library",
 "version": "1.0.0"}, "spans": [{"traceId": "5B8EFFF798038103D269B633813FC60C",
 "spanId": "EEE19B7EC3C1B174", "parentSpanId": "EEE19B7EC3C1B173", "name": "I'm a server span",
 "startTimeUnixNano": 1544712660000000000, "endTimeUnixNano": 1544712661000000000, "kind": 2,
 "attributes": [{"key": "my.span.attr", "value": {"stringValue": "some value"}}]}]}]}]}"""


def test_the_protocols_own_example_imports(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(SPEC_EXAMPLE)
    run = read_run(ingest.import_files("otlp", tmp_path / "run", [path])[0])
    req = run.requests
    assert req is not None
    assert sorted(req["tier"].to_list()) == ["client", "my.service"]
    span = req.filter(pl.col("tier") == "my.service").row(0, named=True)
    assert (span["end"] - span["start"], span["exclusive"]) == (1.0, 1.0)
    assert span["interaction"] == "I'm a server span"
    assert span["visit"] == "eee19b7ec3c1b174" and span["parent"] == "eee19b7ec3c1b173"


@pytest.mark.parametrize(
    ("text", "where", "field"),
    [
        ('{"resourceSpans": []}\nnot json\n', "line 2", "line"),
        (SPEC_EXAMPLE.replace('"EEE19B7EC3C1B174"', '"xyz"'), "trace.json", "spanId"),
        (
            SPEC_EXAMPLE.replace("1544712661000000000", "1544712650000000000"),
            "trace.json",
            "endTimeUnixNano",
        ),
        (SPEC_EXAMPLE.replace("1544712660000000000", '"soon"'), "trace.json", "resourceSpans"),
        ('{"resourceSpans": []}', "trace.json", "resourceSpans"),
        ('{"spans": []}', "trace.json", "resourceSpans"),
    ],
)
def test_bad_traces_are_named_by_file_line_and_field(
    tmp_path: Path, text: str, where: str, field: str
) -> None:
    path = tmp_path / "trace.json"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        ingest.import_files("otlp", tmp_path / "run", [path])
    assert where in str(err.value) and err.value.field == field


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.one_of(st.binary(max_size=200),
                 st.text(max_size=200).map(str.encode),
                 st.sampled_from([SPEC_EXAMPLE]).map(str.encode).flatmap(
                     lambda b: st.integers(0, len(b)).map(lambda k: b[:k]))))  # fmt: skip
def test_fuzzed_files_give_input_errors_only(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "fuzz.json"
    path.write_bytes(raw)
    try:
        ingest.import_files("otlp", tmp_path / "run", [path], force=True)
    except InputError as exc:
        assert "fuzz.json" in str(exc)
