"""No traceback, no hang, on any input (issue 7): every reproducer a new user found, then
hypothesis on every parser and command-line entry point.

Each command runs in-process through ``tierscope.cli.main`` (the one place errors become exit
codes: anything else escapes as an exception and fails the test) under a deadline, with the
error console made wide so that "one line" means the message, not the terminal's wrapping.
Bad input must give exit status 2 and a short message; no command may run past its deadline.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import string
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierscope import cli
from tierscope.store import RunWriter

ROOT = Path(__file__).resolve().parent.parent
#: Longest line any message may have (values are cut at 80 characters, texts at 240).
MAX_LINE = 600
#: Seconds one command may take before it counts as a hang (generous: CI machines are busy).
DEADLINE_S = 30.0
UNREACHABLE = "http://127.0.0.1:9/"  # the discard port: nothing listens there
FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)


class HangError(Exception):
    """A command ran past its deadline."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise HangError(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(autouse=True)
def wide_error_console(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cli.err, "width", 100_000)
    # run's clean-up of killed runs looks for their locks here: only this test's
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def tierscope(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str, float]:
    """Run one command: (exit status, stdout, stderr, seconds)."""
    capsys.readouterr()
    t0 = time.monotonic()
    with deadline(DEADLINE_S):
        code = cli.main([str(a) for a in args])
    elapsed = time.monotonic() - t0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    for line in err.splitlines():
        assert len(line) <= MAX_LINE, line[:200]
    return code, out, err, elapsed


def refused(capsys: pytest.CaptureFixture[str], *args: str, seconds: float = 15.0) -> str:
    """Run a command that must refuse its input: exit 2, one short line, quickly."""
    code, _, err, elapsed = tierscope(capsys, *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, err[:500])
    assert len(lines) == 1 and lines[0].startswith("error: "), err[:500]
    assert elapsed < seconds
    return lines[0]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _model(tmp_path: Path, doc: dict[str, Any]) -> Path:
    return _write(tmp_path / "model.yaml", yaml.safe_dump(doc))


def _big(population: int, servers: int = 4) -> dict[str, Any]:
    return {
        "stations": [{"name": "web", "servers": servers}, {"name": "db"}],
        "classes": [
            {
                "name": "users",
                "population": population,
                "think_time": 1.0,
                "demands": {"web": 0.01, "db": 0.02},
            }
        ],
    }


def _points_run(path: Path, throughput: list[float]) -> Path:
    n = len(throughput)
    none = pl.Series([None] * n, dtype=pl.Float64)
    frame = pl.DataFrame(
        {"setup": ["s0"] * n, "level": [10.0 * (i + 1) for i in range(n)], "rep": [0] * n}
    ).with_columns(
        pl.Series("throughput", throughput, dtype=pl.Float64),
        *(none.alias(c) for c in ("t_start", "t_end", "rt_mean", "rt_p50", "rt_p95")),
        *(none.alias(c) for c in ("rt_p99", "errors")),
    )
    with RunWriter.create(path, kind="import", spec={"name": path.name}) as run:
        run.write("points", frame)
    return path


SPEC = "name: fuzz\nsweep: {levels: [1]}\n"

# ---- item 7: the reproducers ---------------------------------------------------------------------


@pytest.mark.parametrize("doc", [_big(10**9), _big(10**12), _big(20, servers=10**9)])
def test_huge_models_are_answered_quickly(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, doc: dict[str, Any]
) -> None:
    code, out, _, elapsed = tierscope(capsys, "model", "solve", _model(tmp_path, doc), "--json")
    assert code == 0 and '"throughput"' in out and elapsed < 15


@pytest.mark.parametrize(
    ("doc", "field"),
    [(_big(10**9), "classes[0].population"), (_big(5, servers=10**9), "stations[0].servers")],
)
def test_simulating_more_than_the_engine_takes_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, doc: dict[str, Any], field: str
) -> None:
    line = refused(capsys, "model", "simulate", _model(tmp_path, doc))
    assert field in line and "model solve" in line


def test_exact_on_a_huge_lattice_is_refused_with_an_estimate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    line = refused(capsys, "model", "solve", _model(tmp_path, _big(10**9)), "--method", "exact")
    assert "population vectors" in line and "--method linearizer" in line


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "stations: [{name: cpu}]\nclasses: [{name: c, population: 5, demands: {cpu: 0}}]\n",
            "unbounded",
        ),
        (
            "stations: [{name: cpu}]\n"
            "classes: [{name: c, population: true, demands: {cpu: 0.1}}]\n",
            "classes[0].population",
        ),
        ("stations: " + "[" * 3000 + "]" * 3000 + "\n", "nested more than"),
    ],
    ids=["zero-demand", "population-true", "deep-yaml"],
)
def test_bad_model_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, needle: str
) -> None:
    assert needle in refused(capsys, "model", "solve", _write(tmp_path / "m.yaml", text))


def test_import_epoch_milliseconds(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    csv = _write(tmp_path / "m.csv", "ts,tier,metric,value\n1700000000000,web,cpu,0.5\n")
    line = refused(capsys, "import", "csv", "--out", tmp_path / "run", "--metrics", csv)
    assert "milliseconds" in line


def test_import_a_64_mb_column_name(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    csv = _write(tmp_path / "p.csv", "level,throughput," + "x" * (64 << 20) + "\n1,2,3\n")
    line = refused(capsys, "import", "csv", "--out", tmp_path / "run", "--points", csv)
    assert len(line) < 300


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_analysis_of_nan_throughputs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    run = _points_run(tmp_path / "run", [10.0, float("nan"), 30.0, 31.0, 31.0])
    code, _, err, _ = tierscope(capsys, command, run)
    assert code == 0, err[:500]


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_analysis_of_a_damaged_parquet_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    run = _points_run(tmp_path / "run", [10.0, 20.0, 30.0])
    table = run / "points.parquet"
    table.write_bytes(table.read_bytes()[:-20])
    assert str(table) in refused(capsys, command, run)


@pytest.mark.parametrize(
    ("tier", "field"),
    [("{memory: -1}", "memory"), ("{cpuset: '4095'}", "cpuset"), ("{memory: 1000T}", "memory")],
)
def test_run_with_limits_the_host_lacks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tier: str, field: str
) -> None:
    spec = _write(tmp_path / "s.yaml", f"system: {{tiers: {{db: {tier}}}}}\n" + SPEC)
    line = refused(capsys, "run", spec, "--out", tmp_path / "out")
    assert f"system.tiers.db.{field}" in line and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "flags",
    [["--users", "0"], ["--rate", "0"], ["--users", "2", "--duration", "0"]],
    ids=["users", "rate", "duration"],
)
def test_load_that_would_measure_nothing(
    capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    line = refused(capsys, "load", UNREACHABLE, *flags)
    assert ("> 0" in line) and ("--users" in line or "--rate" in line or "--duration" in line)


# ---- item 8: run folders -------------------------------------------------------------------------


def test_run_name_cannot_leave_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a" / "b").mkdir(parents=True)
    spec = _write(tmp_path / "a" / "b" / "s.yaml", "name: ../../x\nsweep: {levels: [1]}\n")
    assert "field 'name'" in refused(capsys, "run", spec)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_run_into_a_non_empty_folder_makes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tierscope.experiment import runner

    def no_cgroups(name: str) -> None:
        raise AssertionError("cgroups made before the run folder was claimed")

    monkeypatch.setattr(runner, "open_hierarchy", no_cgroups)
    out = tmp_path / "out"
    out.mkdir()
    _write(out / "keep.txt", "mine")
    line = refused(capsys, "run", _write(tmp_path / "s.yaml", SPEC), "--out", out)
    assert "a new or empty folder" in line and [p.name for p in out.iterdir()] == ["keep.txt"]


# ---- fuzzing -------------------------------------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, -1, 10**9, 10**12, 10**15, 10**16, 2**63, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-300, 5e-324, 1e-9, 1e9, 1e300, 1.7976931348623157e308]),
    st.text(max_size=20),
    st.sampled_from(["cpu", "db", "web", "delay", "queue", "exp", "nan", "inf", "1e999", "-1"]),
)
KEYS = [
    "name",
    "stations",
    "classes",
    "servers",
    "rates",
    "population",
    "demands",
    "think_time",
    "arrival_rate",
    "type",
    "cpu",
    "db",
    "sweep",
    "levels",
    "system",
    "tiers",
    "memory",
    "cpuset",
    "workload",
    "mode",
    "users",
    "interactions",
    "url",
    "phases",
    "steady",
    "setups",
    "set",
    "visits",
    "service",
]
LOAD_FLAGS = [
    "--users",
    "--rate",
    "--duration",
    "--warmup",
    "--ramp-down",
    "--think",
    "--timeout",
    "--threads",
    "--connections",
    "--session-rate",
    "--max-outstanding",
]
DOCS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(KEYS) | st.text(max_size=8),
            inner,
            max_size=5,
        ),
    ),
    max_leaves=25,
)
EDGE_TIMES = st.sampled_from([0.0, 1e-9, 1e-6, 1e-3, 0.02, 0.5, 1.0, 7.0, 1e6, 1e9])
EDGE_COUNTS = st.sampled_from([0, 1, 2, 3, 64, 65, 1000, 10**6, 10**6 + 1, 10**9, 10**12, 10**15])
METHODS = st.sampled_from(["auto", "exact", "amva", "linearizer", "nc", "ctmc", "bounds", "open"])


@st.composite
def models(draw: st.DrawFn) -> dict[str, Any]:
    """Valid-looking models with numbers at the edges: servers, populations, times."""
    stations = []
    for k in range(draw(st.integers(1, 3))):
        doc: dict[str, Any] = {"name": f"s{k}"}
        kind = draw(st.sampled_from(["queue", "multi", "rates", "delay"]))
        if kind in ("multi", "rates") and draw(st.booleans()):
            doc["servers"] = draw(EDGE_COUNTS.filter(lambda v: v >= 1))
        if kind == "rates":
            # moderate multipliers: wild ones (1, then 1e9) only make amva iterate to max_iter
            doc["rates"] = draw(
                st.lists(st.sampled_from([0.25, 0.9, 1.0, 3.0]), min_size=1, max_size=3)
            )
        if kind == "delay":
            doc["type"] = "delay"
        stations.append(doc)
    classes = []
    for c in range(draw(st.integers(1, 2))):
        cl: dict[str, Any] = {
            "name": f"c{c}",
            "demands": {s["name"]: draw(EDGE_TIMES) for s in stations},
        }
        if draw(st.integers(0, 3)) == 0:
            cl["arrival_rate"] = draw(EDGE_TIMES)
        else:
            cl["population"] = draw(EDGE_COUNTS)
            cl["think_time"] = draw(EDGE_TIMES)
        classes.append(cl)
    return {"stations": stations, "classes": classes}


def _yaml(doc: Any) -> str:
    try:
        return yaml.safe_dump(doc)
    except (yaml.YAMLError, ValueError, TypeError):
        return str(doc)


@FUZZ
@given(doc=DOCS)
def test_fuzz_any_yaml_document_as_a_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, doc: Any
) -> None:
    path = _write(tmp_path / "m.yaml", _yaml(doc))
    assert tierscope(capsys, "model", "solve", path, "--json")[0] in (0, 2)


@pytest.fixture
def quick_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Exact MVA refused above 2 s estimated (30 s by default), so that no example can run
    into the deadline: what is fuzzed is the refusal, not the recursion's speed."""
    from tierscope.qn import mva, solvers

    monkeypatch.setattr(mva, "EXACT_SECONDS_LIMIT", 2.0)
    monkeypatch.setattr(solvers, "AUTO_EXACT_SECONDS", 1.0)


@settings(FUZZ, max_examples=60)
@given(doc=models(), method=METHODS)
def test_fuzz_models_with_numbers_at_the_edges(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    quick_exact: None,
    doc: dict[str, Any],
    method: str,
) -> None:
    path = _write(tmp_path / "m.yaml", yaml.safe_dump(doc))
    code, out, err, _ = tierscope(capsys, "model", "solve", path, "--method", method, "--json")
    assert code in (0, 2), err[:500]
    assert (code == 0) == bool(out)


@FUZZ
@given(text=st.text(string.printable, max_size=300))
def test_fuzz_any_text_as_a_model_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str
) -> None:
    path = _write(tmp_path / "m.yaml", text)
    assert tierscope(capsys, "model", "solve", path)[0] in (0, 2)


@FUZZ
@given(doc=DOCS, overrides=st.lists(st.text(max_size=30), max_size=2))
def test_fuzz_experiment_specs_never_start_into_a_used_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, doc: Any, overrides: list[str]
) -> None:
    out = tmp_path / "used"
    out.mkdir(exist_ok=True)
    _write(out / "keep.txt", "mine")
    spec = _write(tmp_path / "s.yaml", _yaml(doc))
    sets = [a for o in overrides for a in ("--set", o)]
    # whatever the spec, the folder is taken: never a run
    assert tierscope(capsys, "run", spec, "--out", out, *sets)[0] == 2


CELLS = st.one_of(
    st.sampled_from(["", "0", "-1", "1", "1.5", "nan", "inf", "-inf", "1e999", "1e308", "web"]),
    st.sampled_from(["1700000000", "1700000000000", "2024-01-01T00:00:00Z", "9999-12-31", "x,y"]),
    st.integers(-(10**20), 10**20).map(str),
    st.floats().map(repr),
    st.text(string.printable, max_size=12),
)
KINDS = {
    "metrics": ["ts", "tier", "metric", "value", "node", "setup", "level", "rep"],
    "requests": ["tier", "request_id", "start", "end", "interaction", "status", "level"],
    "points": ["level", "throughput", "setup", "rep", "rt_mean", "t_start", "t_end", "web.cpu"],
}


@st.composite
def csv_files(draw: st.DrawFn) -> tuple[str, str]:
    kind = draw(st.sampled_from(sorted(KINDS)))
    columns = KINDS[kind]
    header = draw(st.permutations(columns).map(lambda cs: cs[: draw(st.integers(1, len(cs)))]))
    if draw(st.integers(0, 5)) == 0:
        header = [*header, draw(st.text(string.printable, min_size=1, max_size=40))]
    rows = draw(st.lists(st.lists(CELLS, min_size=len(header), max_size=len(header)), max_size=6))

    def line(cells: list[str]) -> str:
        return ",".join('"' + c.replace('"', '""') + '"' if c else c for c in cells)

    return kind, "\n".join([line(header), *(line(r) for r in rows)]) + "\n"


@settings(FUZZ, max_examples=40)
@given(file=csv_files())
def test_fuzz_csv_imports_and_their_analysis(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, file: tuple[str, str]
) -> None:
    kind, text = file
    csv = _write(tmp_path / f"{kind}.csv", text)
    out = tmp_path / "run"
    code = tierscope(capsys, "import", "csv", "--out", out, f"--{kind}", csv)[0]
    assert code in (0, 2)
    if code == 0:
        assert tierscope(capsys, "analyze", out, "--no-write", "--json")[0] in (0, 2)
        shutil.rmtree(out)  # the next example imports into a new folder again


NUMBERS = st.sampled_from(["0", "-1", "1", "2", "0.5", "nan", "inf", "-inf", "1e308", "1e-300"])


@FUZZ
@given(
    flags=st.lists(
        st.tuples(
            st.sampled_from(LOAD_FLAGS),
            NUMBERS,
        ),
        max_size=4,
        unique_by=lambda f: f[0],
    )
)
def test_fuzz_load_options(
    capsys: pytest.CaptureFixture[str], flags: list[tuple[str, str]]
) -> None:
    args = [a for f in flags for a in f]
    # nothing listens at the target: valid options end at the reachability check
    assert tierscope(capsys, "load", UNREACHABLE, *args)[0] == 2


@FUZZ
@given(doc=DOCS)
def test_fuzz_workload_files(capsys: pytest.CaptureFixture[str], tmp_path: Path, doc: Any) -> None:
    path = _write(tmp_path / "w.yaml", _yaml(doc))
    code = tierscope(capsys, "load", path, "--base-url", UNREACHABLE, "--duration", "1")[0]
    assert code == 2


@FUZZ
@given(
    kind=st.sampled_from(["mm1", "mmm", "mmmk", "mg1", "mg1ps", "x"]),
    values=st.lists(NUMBERS | st.sampled_from(["1000000000", "100"]), min_size=5, max_size=5),
)
def test_fuzz_queue_formulas(
    capsys: pytest.CaptureFixture[str], kind: str, values: list[str]
) -> None:
    lam, s, m, _, scv = values
    code = tierscope(
        capsys, "model", "queue", "--kind", kind, "-l", lam, "-s", s, "--servers",
        m.split(".")[0].replace("nan", "1").replace("inf", "1").replace("1e308", "7"),
        "--capacity", "9", "--scv", scv,
    )[0]  # fmt: skip
    assert code in (0, 2)


@FUZZ
@given(
    rows=st.lists(st.tuples(CELLS, CELLS), max_size=8),
    header=st.sampled_from(["concurrency,throughput", "n,x", ""]),
)
def test_fuzz_usl_csv(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, rows: list[tuple[str, str]], header: str
) -> None:
    text = "\n".join([header, *(f"{a},{b}" for a, b in rows)]) + "\n"
    assert tierscope(capsys, "usl", _write(tmp_path / "u.csv", text))[0] in (0, 2)


@FUZZ
@given(rows=st.lists(st.lists(CELLS, min_size=4, max_size=4), min_size=1, max_size=6))
def test_fuzz_observation_csv(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, rows: list[list[str]]
) -> None:
    text = "\n".join(["t,x_a,u_cpu,dt", *(",".join(r) for r in rows)]) + "\n"
    path = _write(tmp_path / "obs.csv", text)
    assert tierscope(capsys, "estimate", path, "--bootstrap", "0")[0] in (0, 2)


OPTION_KEYS = ["margin", "window_s", "slo_s", "permutations", "seed", "peak_fraction", "x", ""]


@FUZZ
@given(pairs=st.lists(st.tuples(st.sampled_from(OPTION_KEYS), NUMBERS | st.text(max_size=10))))
def test_fuzz_analysis_options(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, pairs: list[tuple[str, str]]
) -> None:
    run = tmp_path / "run"
    if not run.exists():
        _points_run(run, [10.0, 20.0, 30.0, 31.0])
    args = [a for k, v in pairs for a in ("-o", f"{k}={v}")]
    assert tierscope(capsys, "analyze", run, "--no-write", *args)[0] in (0, 2)


TIMES = st.sampled_from(
    ["0", "1", "1.5", "1652812677", "1652812677000", "1652812677000000000", "2022-05-17 18:37:57",
     "2022-05-17T18:37:58Z", "2022-05-17T18:37:59+02:00", "yesterday", "", "-3", "1e30"]
)  # fmt: skip
WIDE_HEADERS = st.sampled_from(
    ["web_cpu", "db-1_cpu_util", "carts_lat_99", "x.mem", "svc_lod", "q_queue_length", "bogus",
     "a_b_c", "web_cpu"]
)  # fmt: skip


@settings(FUZZ, max_examples=40)
@given(
    header=st.lists(WIDE_HEADERS, min_size=1, max_size=4),
    rows=st.lists(st.tuples(TIMES, st.lists(NUMBERS | st.just(""), min_size=4, max_size=4)),
                  min_size=0, max_size=6),
    options=st.lists(st.sampled_from([["--cpu-unit", "percent"], ["--cpu-unit", "watts"],
                                      ["--time-unit", "ms"], ["--tz", "Mars/Olympus"],
                                      ["--cpu-limit", "web=0.5"], ["--cpu-limit", "web=-1"]]),
                     max_size=2),
)  # fmt: skip
def test_fuzz_wide_metric_imports_and_their_analysis(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    header: list[str],
    rows: list[tuple[str, list[str]]],
    options: list[list[str]],
) -> None:
    lines = [",".join(["time", *header])]
    lines += [",".join([t, *values[: len(header)]]) for t, values in rows]
    csv = _write(tmp_path / "wide.csv", "\n".join(lines) + "\n")
    out = tmp_path / "run"
    flags = [f for pair in options for f in pair]
    code = tierscope(capsys, "import", "metrics", csv, "--out", out, *flags)[0]
    assert code in (0, 2)
    if code == 0:
        assert tierscope(capsys, "analyze", out, "--no-write", "--json")[0] in (0, 2)
        shutil.rmtree(out)


SERIES = st.fixed_dictionaries(
    {
        "metric": st.dictionaries(st.sampled_from(["job", "container", "__name__", "x"]),
                                  st.sampled_from(["a", "b", "container_cpu_usage_seconds_total",
                                                   ""]), max_size=3),
        "values": st.lists(st.lists(NUMBERS | st.sampled_from(["NaN", "x", "1652565600"]),
                                    min_size=1, max_size=3), max_size=4),
    }
)  # fmt: skip


@settings(FUZZ, max_examples=40)
@given(
    doc=DOCS
    | st.fixed_dictionaries(
        {"data": st.fixed_dictionaries({"resultType": st.sampled_from(["matrix", "vector"]),
                                        "result": st.lists(SERIES, max_size=3)})}
    ),
    name=st.sampled_from(["cpu", "mem", "query"]),
)  # fmt: skip
def test_fuzz_prometheus_answers_and_their_analysis(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, doc: Any, name: str
) -> None:
    f = tmp_path / f"{name}.json"
    try:
        f.write_text(json.dumps(doc))
    except (TypeError, ValueError):  # not JSON-serialisable: not an answer Prometheus writes
        return
    out = tmp_path / "run"
    code = tierscope(capsys, "import", "prometheus", f, "--out", out)[0]
    assert code in (0, 2)
    if code == 0:
        assert tierscope(capsys, "analyze", out, "--no-write", "--json")[0] in (0, 2)
        shutil.rmtree(out)
