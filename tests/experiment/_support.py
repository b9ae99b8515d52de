"""Helpers for integration tests that need something on the host."""

from __future__ import annotations

import os

import pytest


def require(what: str, install: str) -> None:
    """Skip locally, fail under CI=true: an integration test's missing prerequisite."""
    message = f"{what} is not available here ({install})"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
