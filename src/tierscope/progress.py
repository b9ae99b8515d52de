"""Progress of long computations, reported without knowing who shows it.

Design decision: the layers that compute (simulation, prediction, planning, learning) call
:func:`step` at natural points (a level simulated, a fold fitted); whoever wants to show it (the
CLI, with a progress bar on a terminal) installs a sink with :func:`reporting` around the call.
No sink, no cost: a library caller and ``--json`` see nothing, and no callback has to be passed
down through every layer. The sink lives in a context variable, so it follows the calling
thread and never leaks into another command run in the same process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

__all__ = ["Sink", "reporting", "step", "tracked"]

#: ``sink(stage, done, total)``: ``stage`` names what is being done ("simulating 8 levels");
#: ``total`` 0 when unknown.
Sink = Callable[[str, float, float], None]
T = TypeVar("T")

_sink: ContextVar[Sink | None] = ContextVar("tierscope_progress", default=None)


@contextmanager
def reporting(sink: Sink | None) -> Iterator[None]:
    """Send the progress of everything run inside the block to ``sink`` (None: nowhere)."""
    token = _sink.set(sink)
    try:
        yield
    finally:
        _sink.reset(token)


def step(stage: str, done: float, total: float) -> None:
    """``done`` of ``total`` units of ``stage`` are finished."""
    sink = _sink.get()
    if sink is not None:
        sink(stage, done, total)


def tracked(items: Iterable[T], stage: str, total: int | None = None) -> Iterator[T]:
    """Yield ``items``, reporting each one finished as a step of ``stage``."""
    if _sink.get() is None:
        yield from items
        return
    if total is None:
        items = list(items)
        total = len(items)
    step(stage, 0, total)
    for done, item in enumerate(items, start=1):
        yield item
        step(stage, done, total)
