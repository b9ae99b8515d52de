"""A one-second server stall, seen by an open loop and hidden by a closed loop
===========================================================================

The test server answers in 2 ms and freezes for one second in the middle of the run. An open
loop keeps offering 200 requests per second during the freeze and charges each one the time it
waited from its intended start, so the freeze dominates the upper percentiles. A closed loop of
10 users sends only one request per user into the freeze and then waits: ten slow requests among
thousands of fast ones, and the percentiles look healthy. This is coordinated omission.
"""

# %%
# One helper runs a workload against the test server and freezes it 1.5 s into the steady window.
import time

from tierscope.load import LoadGenerator, TestServer
from tierscope.spec.workload import parse_workload


def run_with_stall(doc: dict, level: float, **options: object) -> dict:
    workload = parse_workload({**doc, "interactions": [{"name": "get", "url": "/"}]})
    with TestServer(0.002) as server:
        handle = LoadGenerator(workload, [server.url], **options).start(level, 0.0, 4.0)
        time.sleep(max(0.0, handle.steady_start + 1.5 - time.monotonic()))
        server.stall(1.0)
        return handle.wait().summary


# %%
# Open loop: 200 requests/s at constant spacing, whatever the server does.
open_loop = run_with_stall({"mode": "open", "arrival": "constant"}, 200)
# Closed loop: 10 users, no think time.
closed_loop = run_with_stall({"mode": "closed"}, 10)

# %%
# The open loop reports the stall: a quarter of its requests were due during the freeze.
lat = open_loop["latency"]
print(f"open loop:   p50 under 10 ms: {lat['p50'] < 0.01}")
print(f"             p99 near 1 s:    {0.9 < lat['p99'] < 1.05}")
# The closed loop completes far more requests, and its p99 stays in milliseconds: only its
# maximum shows that anything happened.
lat = closed_loop["latency"]
print(f"closed loop: p99 under 50 ms: {lat['p99'] < 0.05}")
print(f"             max near 1 s:    {0.9 < lat['max'] < 1.1}")
