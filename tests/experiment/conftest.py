"""Fixtures for runner tests: real cgroups and real processes on this host."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.experiment._support import require
from tierscope.experiment.cgroups import CgroupUnavailableError, Hierarchy, open_hierarchy


@pytest.fixture
def hierarchy() -> Iterator[Hierarchy]:
    try:
        h = open_hierarchy(f"tierscope-test-{uuid.uuid4().hex[:6]}")
    except CgroupUnavailableError as exc:
        require("writable cgroups", f"run as root on Linux: {exc}")
    try:
        yield h
    finally:
        h.remove()
