# ruff: noqa: E501 (the JMeter plan is JMeter's own XML)
"""``tierscope import jmeter``: JMeter 5.6.3 (from Maven Central, laid out by .ci/jmeter-home;
``TIERSCOPE_JMETER`` names its launcher jar) runs a plan of two thread groups, one after the
other (2 threads, then 4), against a loopback server that notes the time of every request it
serves; the import must find both levels, every request, and each level's throughput must match
what the server counted in the same window."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from tests.experiment._support import require
from tests.ingest._servers import counting_server
from tierscope import ingest
from tierscope.spec.runs import ImportSpec
from tierscope.store import read_run

pytestmark = [pytest.mark.real_system, pytest.mark.timing, pytest.mark.timeout(240)]

SERVICE_S = 0.02
DEFAULT_LAUNCHER = Path.home() / ".cache/tierscope/jmeter-5.6.3/bin/ApacheJMeter.jar"
GROUP = """
      <ThreadGroup guiclass="ThreadGroupGui" testclass="ThreadGroup" testname="users{n}" enabled="true">
        <stringProp name="ThreadGroup.on_sample_error">continue</stringProp>
        <elementProp name="ThreadGroup.main_controller" elementType="LoopController" guiclass="LoopControlPanel" testclass="LoopController" enabled="true">
          <boolProp name="LoopController.continue_forever">false</boolProp>
          <intProp name="LoopController.loops">-1</intProp>
        </elementProp>
        <stringProp name="ThreadGroup.num_threads">{n}</stringProp>
        <stringProp name="ThreadGroup.ramp_time">0</stringProp>
        <boolProp name="ThreadGroup.scheduler">true</boolProp>
        <stringProp name="ThreadGroup.duration">{seconds}</stringProp>
        <stringProp name="ThreadGroup.delay">0</stringProp>
      </ThreadGroup>
      <hashTree>
        <HTTPSamplerProxy guiclass="HttpTestSampleGui" testclass="HTTPSamplerProxy" testname="item" enabled="true">
          <elementProp name="HTTPsampler.Arguments" elementType="Arguments" guiclass="HTTPArgumentsPanel" testclass="Arguments" enabled="true">
            <collectionProp name="Arguments.arguments"/>
          </elementProp>
          <stringProp name="HTTPSampler.domain">127.0.0.1</stringProp>
          <stringProp name="HTTPSampler.port">{port}</stringProp>
          <stringProp name="HTTPSampler.protocol">http</stringProp>
          <stringProp name="HTTPSampler.path">/item</stringProp>
          <stringProp name="HTTPSampler.method">GET</stringProp>
          <boolProp name="HTTPSampler.use_keepalive">true</boolProp>
        </HTTPSamplerProxy>
        <hashTree/>
        <ConstantTimer guiclass="ConstantTimerGui" testclass="ConstantTimer" testname="think" enabled="true">
          <stringProp name="ConstantTimer.delay">80</stringProp>
        </ConstantTimer>
        <hashTree/>
      </hashTree>"""
PLAN = """<?xml version="1.0" encoding="UTF-8"?>
<jmeterTestPlan version="1.2" properties="5.0" jmeter="5.6.3">
  <hashTree>
    <TestPlan guiclass="TestPlanGui" testclass="TestPlan" testname="tierscope" enabled="true">
      <boolProp name="TestPlan.functional_mode">false</boolProp>
      <boolProp name="TestPlan.serialize_threadgroups">true</boolProp>
      <elementProp name="TestPlan.user_defined_variables" elementType="Arguments" guiclass="ArgumentsPanel" testclass="Arguments" enabled="true">
        <collectionProp name="Arguments.arguments"/>
      </elementProp>
    </TestPlan>
    <hashTree>{groups}
    </hashTree>
  </hashTree>
</jmeterTestPlan>
"""


@pytest.fixture
def server() -> Iterator[tuple[int, list[float]]]:
    with counting_server(SERVICE_S) as served:
        yield served


def test_a_real_jmeter_run_imports_with_its_levels_and_throughput(
    server: tuple[int, list[float]], tmp_path: Path
) -> None:
    launcher = Path(os.environ.get("TIERSCOPE_JMETER", str(DEFAULT_LAUNCHER)))
    java = shutil.which("java")
    if not launcher.is_file() or java is None:
        require("JMeter", f"Java, and .ci/jmeter-home {DEFAULT_LAUNCHER.parents[1]}")
    port, arrivals = server
    groups = "".join(GROUP.format(n=n, seconds=12, port=port) for n in (2, 4))
    (tmp_path / "plan.jmx").write_text(PLAN.format(groups=groups))
    jtl = tmp_path / "results.jtl"
    proc = subprocess.run(
        [java, "-jar", str(launcher), "-n", "-t", str(tmp_path / "plan.jmx"), "-l", str(jtl), "-j",
         str(tmp_path / "jmeter.log"),
         "-Jjmeter.save.saveservice.output_format=csv",
         "-Jjmeter.save.saveservice.print_field_names=true",
         "-Jjmeter.save.saveservice.thread_counts=true"],
        capture_output=True, text=True, timeout=180, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert jtl.exists() and jtl.stat().st_size, proc.stdout[-2000:] + proc.stderr[-2000:]
    run_dir, notes = ingest.import_files("jmeter", tmp_path / "run", [jtl])
    run = read_run(run_dir)
    requests, points = run.requests, run.points
    assert requests is not None and points is not None, notes
    assert requests.height == len(arrivals)  # every request JMeter made, as the server saw
    assert set(requests["interaction"]) == {"item"}
    assert points["level"].to_list() == [2.0, 4.0]
    assert isinstance(run.spec, ImportSpec) and run.spec.time_origin is not None
    origin = dt.datetime.fromisoformat(run.spec.time_origin).timestamp()
    for p in points.iter_rows(named=True):
        a, b = origin + p["t_start"], origin + p["t_end"]
        served = sum(a <= t < b for t in arrivals) / (b - a)
        assert p["throughput"] == pytest.approx(served, rel=0.15), (p, served)
        assert SERVICE_S <= p["rt_mean"] < 1.0
        assert p["errors"] == 0
    assert requests.filter(pl.col("status") == "error").height == 0
