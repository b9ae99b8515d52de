"""Servers tierscope runs from Maven Central jars, fetched once into the user's cache.

``tierscope fetch kafka`` resolves the pinned artifacts with Maven (``dependency:copy-dependencies``
of a generated POM) into ``$XDG_CACHE_HOME/tierscope/<name>-<version>/libs``; a ``complete``
marker written last makes a fetch that was interrupted start again, and a fetched set is never
fetched twice. The versions are pinned because version ranges resolve to releases that do not
work here (a range over Kafka 4.x picks 4.4.0, whose tools jar does not resolve; one over
Cassandra 5.x picks 6.0-alpha).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tierscope.errors import InputError, TierscopeError

__all__ = ["ARTIFACTS", "Artifact", "cache_dir", "fetch", "java", "libs"]


def cache_dir() -> Path:
    """tierscope's cache: ``$XDG_CACHE_HOME/tierscope`` (``~/.cache/tierscope``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tierscope"


@dataclass(frozen=True)
class Artifact:
    """A pinned set of Maven coordinates (``group:artifact``) at ``version``, plus extras at
    their own versions (``group:artifact:version``)."""

    name: str
    version: str
    coordinates: tuple[str, ...]
    extras: tuple[str, ...] = ()

    @property
    def home(self) -> Path:
        return cache_dir() / f"{self.name}-{self.version}"

    def pom(self) -> str:
        # group:artifact[:classifier] at the version, extras group:artifact:version[:classifier]
        deps = []
        for c in self.coordinates:
            g, a, *cls = c.split(":")
            deps.append((g, a, self.version, *cls))
        deps += [tuple(c.split(":")) for c in self.extras]
        body = "".join(
            f"<dependency><groupId>{d[0]}</groupId><artifactId>{d[1]}</artifactId>"
            f"<version>{d[2]}</version>"
            + (f"<classifier>{d[3]}</classifier>" if len(d) > 3 else "")
            + "</dependency>"
            for d in deps
        )
        return (
            '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            f"<groupId>tierscope</groupId><artifactId>{self.name}-libs</artifactId>"
            f"<version>1</version><packaging>pom</packaging><dependencies>{body}</dependencies>"
            "</project>"
        )


ARTIFACTS: dict[str, Artifact] = {
    # the broker, its tools (topics, storage format) and a log4j binding (without it, no logs)
    "kafka": Artifact(
        "kafka",
        "4.3.1",
        ("org.apache.kafka:kafka_2.13", "org.apache.kafka:kafka-tools"),
        ("org.apache.logging.log4j:log4j-slf4j-impl:2.25.4",),
    ),
    # the database with its dependencies (logback among them); 5.0.9 pinned, see the module
    "cassandra": Artifact("cassandra", "5.0.9", ("org.apache.cassandra:cassandra-all",)),
    # the JVM agent that serves JMX as JSON over HTTP (the brokers' metrics)
    "jolokia": Artifact("jolokia", "2.5.1", ("org.jolokia:jolokia-agent-jvm:javaagent",)),
}


def java() -> str:
    """The ``java`` to run servers with (Java 17 or later), or a clear error."""
    path = shutil.which("java")
    if path is None:
        why = "Java 17 or later on PATH (apt-get install openjdk-17-jre-headless)"
        raise InputError("java", None, why)
    return path


def fetched(name: str) -> bool:
    return (_artifact(name).home / "complete").is_file()


def libs(name: str) -> Path:
    """The fetched jars of ``name``; an error naming ``tierscope fetch NAME`` if missing."""
    art = _artifact(name)
    if not (art.home / "complete").is_file():
        raise InputError(name, "not fetched", f"`tierscope fetch {name}` run first ({art.home})")
    return art.home / "libs"


def _artifact(name: str) -> Artifact:
    if name not in ARTIFACTS:
        raise InputError("NAME", name, "one of " + ", ".join(ARTIFACTS))
    return ARTIFACTS[name]


def fetch(name: str, *, timeout: float = 900.0) -> Path:
    """Fetch ``name``'s jars into the cache (once) and return their folder."""
    art = _artifact(name)
    if (art.home / "complete").is_file():
        return art.home / "libs"
    java()
    mvn = shutil.which("mvn")
    if mvn is None:
        raise InputError("mvn", None, "Maven on PATH to fetch the jars (apt-get install maven)")
    art.home.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=art.home.parent, prefix=f".{art.name}-") as tmp:
        work = Path(tmp)
        (work / "pom.xml").write_text(art.pom())
        cmd = [mvn, "-q", "-B", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
               f"-DoutputDirectory={work / 'libs'}", "-DincludeScope=runtime"]  # fmt: skip
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise TierscopeError(f"fetching {name} took more than {timeout:.0f} s") from None
        if proc.returncode != 0 or not any((work / "libs").glob("*.jar")):
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise TierscopeError(f"Maven could not fetch {name} {art.version}:\n{tail}")
        if art.home.exists():  # an interrupted fetch
            shutil.rmtree(art.home)
        art.home.mkdir()
        (work / "libs").rename(art.home / "libs")
        (art.home / "pom.xml").write_text(art.pom())
        (art.home / "complete").write_text(f"{art.version}\n")
    return art.home / "libs"
