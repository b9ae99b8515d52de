"""``tierscope import collectl``: the real collectl (Debian's package) records this host while
a process the test starts (named ``tsburn``) spins a core and holds 200 MB; the import must find
the host with a node per CPU, and the process as its own component using about a core and at
least the memory it holds."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.experiment._support import require
from tierscope import ingest
from tierscope.errors import InputError
from tierscope.store import read_run

HELD = 200 * 2**20
BURN = (
    "import time\n"
    f"held = bytearray({HELD})\n"
    "for i in range(0, len(held), 4096):\n    held[i] = 1\n"
    "end = time.time() + 6\n"
    "while time.time() < end:\n    pass\n"
)


@pytest.mark.real_system
@pytest.mark.timing
@pytest.mark.timeout(120)
def test_a_real_collectl_recording_imports_hosts_cpus_and_processes(tmp_path: Path) -> None:
    collectl = shutil.which("collectl")
    if collectl is None:
        require("collectl", "apt-get install -y collectl")
    burner = subprocess.Popen(["tsburn", "-c", BURN], executable=sys.executable)
    try:
        subprocess.run(
            [collectl, "-sCcmZ", "-i", "1:1", "-c", "5", "-P", "-oTm", "-f", str(tmp_path),
             "--procfilt", "ftsburn"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    finally:
        burner.kill()
        burner.wait()
    files = sorted(p for p in tmp_path.iterdir() if p.is_file())
    assert {p.name.split(".")[1] for p in files} >= {"tab", "cpu", "prc"}, files
    run_dir, notes = ingest.import_files("collectl", tmp_path / "run", files)
    metrics = read_run(run_dir).metrics
    assert metrics is not None
    host = files[0].name.split("-")[0]
    cpu = metrics.filter((pl.col("tier") == host) & (pl.col("metric") == "cpu_util"))
    assert sorted(cpu["node"].unique()) == [f"{host}/cpu{i}" for i in range(_cpus())]
    assert cpu["value"].is_between(0.0, 1.0).all()
    assert {"mem_bytes", "mem_util", "cpu_cores", "run_queue"} <= set(
        metrics.filter(pl.col("tier") == host)["metric"]
    )
    burn = metrics.filter(pl.col("tier") == "tsburn")
    assert burn.height, notes
    cores = burn.filter(pl.col("metric") == "cpu_cores")["value"]
    # a core spun for 6 s: some second of it got at least 40 % of one with a hog beside it
    assert 0.4 <= float(cores.max()) <= 1.05  # type: ignore[arg-type]
    assert float(burn.filter(pl.col("metric") == "mem_bytes")["value"].max()) >= HELD  # type: ignore[arg-type]


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def test_bad_plot_files_are_named(tmp_path: Path) -> None:
    path = tmp_path / "h-20261128.tab"
    path.write_text("#Date Time [CPU]Totl%\n20261128 11:00:00 5\n20261128 11:00:01 x\n")
    with pytest.raises(InputError) as err:
        ingest.import_files("collectl", tmp_path / "run", [path])
    assert err.value.field == "[CPU]Totl%" and "h-20261128.tab, line 3" in str(err.value)
    path.write_text("no header here\n")
    with pytest.raises(InputError) as err:
        ingest.import_files("collectl", tmp_path / "run", [path])
    assert err.value.field == "header"


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(["#Date Time [CPU]Totl% [MEM]Used [MEM]Tot\n", "#UTC [CPU:0]Totl%\n",
                     "#Date Time PID User PCT VmRSS Command\n", ""]),
    st.lists(st.lists(st.sampled_from(["20261128", "11:00:00.5", "1795865603", "5", "-1", "x",
                                       "nan", "python3 a b", "1e400"]), max_size=7),
             max_size=5),
)  # fmt: skip
def test_fuzzed_plot_files_give_input_errors_only(
    tmp_path: Path, header: str, rows: list[list[str]]
) -> None:
    path = tmp_path / "fuzz-20261128.tab"
    path.write_text("# Host: fuzz TZ: +0100\n" + header + "".join(" ".join(r) + "\n" for r in rows))
    try:
        ingest.import_files("collectl", tmp_path / "run", [path], force=True)
    except InputError as exc:
        assert "fuzz-20261128.tab" in str(exc) or exc.field in ("values", "time")
