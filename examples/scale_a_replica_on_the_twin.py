"""Add a replica while the load runs, on the quota-aware twin
===============================================================

The twin is the native simulator running an n-tier system the way Linux runs it: each replica
under a CFS quota (a budget of CPU time per 100 ms period, throttled when it is spent), Python
servers handing the GIL over every 5 ms, replicas behind a balancer. Here 90 users with 0.5 s
think time saturate an app tier of one replica at 0.4 core; a controller decides at 60 s to add
a second replica, which takes requests after a 15 s start-up delay.
"""

# %%
# The system: web (no quota), app (one replica of two possible, 0.4 core), db (0.8 core), with
# per-request CPU demands drawn from 1,000 requests (so their mix is kept).
import numpy as np

from tierscope.sim.twin import SimTier, Twin, TwinSystem

rng = np.random.default_rng(7)
demands = np.column_stack(
    [rng.exponential(m, 1000) for m in (0.0005, 0.004, 0.002)]  # web, app, db: CPU seconds
)
system = TwinSystem(
    tiers=[
        SimTier("web", 1, 1.0, None, quantum=0.005),
        SimTier("app", 1, 1.0, 0.4, quantum=0.005, carry=0.001),
        SimTier("db", 1, 1.0, 0.8, quantum=0.005, carry=0.001),
    ],
    think_time=0.5,
    demand_means=demands.mean(axis=0),
    demand_samples=demands,
    max_replicas=[1, 2, 1],
)
twin = Twin(system, users=90, seed=1, window=1.0)

# %%
# Run 60 s, decide, run on. Every 10 s: throughput, 95th percentile of the response time, and
# the share of the app tier's CFS periods that ran out of budget.
before = twin.advance(60.0)
twin.scale("app", 2, at=60.0 + 15.0)
after = twin.advance(120.0)
print(f"{'from':>5} {'to':>4} {'X [1/s]':>8} {'p95 [ms]':>9} {'app throttled':>14}")
for step in (before, after):
    for a in np.arange(step.start, step.end, 10.0):
        done = (step.done >= a) & (step.done < a + 10)
        inside = (step.t_start >= a) & (step.t_start < a + 10)
        periods = step.periods[inside, 1].sum()
        throttled = step.throttled[inside, 1].sum() / periods if periods else 0.0
        p95 = 1e3 * np.quantile(step.rt[done], 0.95)
        print(f"{a:>5.0f} {a + 10:>4.0f} {done.sum() / 10:>8.1f} {p95:>9.1f} {throttled:>14.0%}")
