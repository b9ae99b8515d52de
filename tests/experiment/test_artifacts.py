"""Pinned server jars from Maven Central (``tierscope fetch``): what is asked for, and the
messages when Java, Maven or a fetch is missing."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tierscope.cli import main
from tierscope.errors import InputError
from tierscope.experiment import artifacts


def test_kafka_is_pinned_with_its_tools_and_a_log_binding() -> None:
    art = artifacts.ARTIFACTS["kafka"]
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    deps = ET.fromstring(art.pom()).findall("m:dependencies/m:dependency", ns)
    got = {(d.findtext("m:artifactId", namespaces=ns), d.findtext("m:version", namespaces=ns))
           for d in deps}  # fmt: skip
    assert ("kafka_2.13", "4.3.1") in got and ("kafka-tools", "4.3.1") in got
    assert any(a == "log4j-slf4j-impl" for a, _ in got)


def test_missing_pieces_name_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(InputError, match="tierscope fetch kafka"):
        artifacts.libs("kafka")
    monkeypatch.setattr(artifacts.shutil, "which", lambda name: None)
    with pytest.raises(InputError, match="Java 17"):
        artifacts.fetch("kafka")
    monkeypatch.setattr(artifacts.shutil, "which", lambda name: None if name == "mvn" else name)
    with pytest.raises(InputError, match="apt-get install maven"):
        artifacts.fetch("kafka")
    assert main(["fetch", "kafak"]) == 2
    assert "one of kafka" in capsys.readouterr().err
    assert not (tmp_path / "tierscope" / "kafka-4.3.1").exists()


def test_cluster_ids_never_look_like_an_option() -> None:
    """Kafka's storage tool reads ``-t ID``: an id starting with "-" (1 in 64 of random ones)
    is taken for an option (a CI run failed on one)."""
    from tierscope.experiment.kafka import _cluster_id

    ids = {_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
