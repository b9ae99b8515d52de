"""The Kafka experiments' loop (`kafka reliability`, `throughput`, `adapt`) keeps what was
measured when a configuration fails or the user interrupts, and says which happened; the CLI
shows the partial document and exits 1 or 130."""

from __future__ import annotations

import json
from typing import Any

import pytest
import typer

from tierscope.cli import _exit_if_partial
from tierscope.experiment.reliability import measure_each


def test_everything_measured() -> None:
    got, status = measure_each([1, 2, 3], "s", lambda i, x: (i, x * 10))
    assert got == [(0, 10), (1, 20), (2, 30)] and status == {"partial": False}


@pytest.mark.parametrize(
    ("error", "expected"),
    [(KeyboardInterrupt(), {"partial": True, "interrupted": True}),
     (OSError("broker-1 exited"), {"partial": True, "failure": "OSError: broker-1 exited"})],
)  # fmt: skip
def test_a_failure_or_an_interruption_keeps_the_rows_before_it(
    error: BaseException, expected: dict[str, Any], capsys: Any
) -> None:
    def one(i: int, x: int) -> int:
        if i == 2:
            raise error
        return x

    got, status = measure_each([5, 6, 7, 8], "s", one)
    assert got == [5, 6] and status == expected
    doc = {"rows": got, **status}
    json.dumps(doc)
    with pytest.raises(typer.Exit) as exit_:
        _exit_if_partial(doc)
    assert exit_.value.exit_code == (130 if "interrupted" in status else 1)
    _exit_if_partial({"rows": got, "partial": False})  # a whole document: no exit
