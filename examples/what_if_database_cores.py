"""What if the database gets more cores?
=========================================

A capacity question answered with the modelling core: take the three-tier web model, vary the
number of database cores and the number of users, and see where the system stops scaling and
which tier is then the bottleneck.
"""

# %%
# Load the model file and compile it once; `dataclasses.replace` makes the what-if variants.
from dataclasses import replace
from pathlib import Path

import numpy as np

from tierscope.qn import Network, solve
from tierscope.spec import load_model

here = Path(__file__).parent
base = Network.from_model(load_model(here / "models" / "three-tier-web.yaml"))
db = base.station_names.index("db")

# %%
# For each core count, solve exactly for 50..300 users and report throughput, response time and
# the station nearest its capacity: the work it is given per second, X D, over the most it can do,
# alpha(L) (the disk overlaps requests and is twice as fast with three or more; it is busy more
# of the time than that share says, which is what `sol.utilization` reports).
print(f"{'db cores':>8} {'users':>6} {'X [1/s]':>9} {'R [ms]':>8}  bottleneck (share of capacity)")
for cores in (2, 3, 4):
    alpha = list(base.alpha)
    alpha[db] = np.arange(1.0, cores + 1)
    servers = base.servers.copy()
    servers[db] = cores
    variant = replace(base, alpha=tuple(alpha), servers=servers)
    for users in (50, 150, 300):
        sol = solve(variant.with_population([users]), "exact")
        capacity = np.array([a[-1] for a in variant.alpha])
        share = sol.throughput[0] * variant.demands[0] / capacity * ~variant.is_delay
        k = int(np.argmax(share))
        print(
            f"{cores:>8} {users:>6} {sol.throughput[0]:>9.2f} {1e3 * sol.response_time[0]:>8.1f}"
            f"  {variant.station_names[k]} ({share[k]:.3f})"
        )
