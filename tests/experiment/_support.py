"""Helpers for integration tests that need something on the host."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest


def pids_naming(text: str) -> list[int]:
    """Processes whose command line contains ``text``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline:
                out.append(int(entry))
    return out


def require(what: str, install: str) -> None:
    """Skip locally, fail under CI=true: an integration test's missing prerequisite."""
    message = f"{what} is not available here ({install})"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


#: X-Request-Id values as a hand-written client may send them (raw header bytes): CSV syntax,
#: the log's own escape character, control characters, bytes that are not UTF-8, UTF-8, and
#: one of 8,000 bytes (nginx takes header lines up to 8 KiB).
ODD_IDS = [
    b'a"b',
    b"a,b",
    b'"',
    b'"quoted, with comma"',
    b"x\ty",
    b"%41",
    b"100%",
    b"\xff\xfe\x80",
    b"\xc3\xa9t\xc3\xa9",
    b"a\x0bb\x00c",
    b"new\nline",
    b"back\\slash",
    b"L" * 8000,
]


def as_recorded(raw: bytes) -> str:
    """What every tier must record: the header's bytes as Latin-1 text (HTTP's own reading)."""
    return raw.decode("latin-1")


def send(url: str, rid: bytes, path: bytes = b"/story?id=3") -> bytes:
    """One request with ``rid`` as raw X-Request-Id bytes; returns the status line."""
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"GET " + path + b" HTTP/1.1\r\nHost: t\r\nX-Request-Id: " + rid
            + b"\r\nConnection: close\r\n\r\n"
        )  # fmt: skip
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data.split(b"\r\n", 1)[0]
