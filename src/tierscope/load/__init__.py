"""Load generation: closed, open and partly-open HTTP workloads with honest latency.

:class:`LoadGenerator` offers a :class:`~tierscope.spec.workload.Workload` from native threads
(``tierscope._native``) and returns a :class:`LoadHandle` at once; ``wait()`` or ``stop()``
give a :class:`LoadResult`. :func:`record_load` writes a run folder (the CLI's ``--out``).
:class:`~tierscope.load.testing.TestServer` is an HTTP server with known, controllable latency
for tests and calibration.
"""

from __future__ import annotations

from tierscope.load.generator import LoadGenerator, LoadHandle, LoadResult, LoadSnapshot
from tierscope.load.record import record_load
from tierscope.load.testing import TestServer

__all__ = [
    "LoadGenerator",
    "LoadHandle",
    "LoadResult",
    "LoadSnapshot",
    "TestServer",
    "record_load",
]
