"""Fixtures for runner tests: real cgroups and real processes on this host."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tierscope.experiment.cgroups import CgroupUnavailableError, Hierarchy, open_hierarchy


def require(what: str, install: str) -> None:
    """Skip locally, fail under CI=true: an integration test's missing prerequisite."""
    message = f"{what} is not available here ({install})"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


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
