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
# the busiest station.
print(f"{'db cores':>8} {'users':>6} {'X [1/s]':>9} {'R [ms]':>8}  bottleneck (utilisation)")
for cores in (2, 3, 4):
    alpha = list(base.alpha)
    alpha[db] = np.arange(1.0, cores + 1)
    servers = base.servers.copy()
    servers[db] = cores
    variant = replace(base, alpha=tuple(alpha), servers=servers)
    for users in (50, 150, 300):
        sol = solve(variant.with_population([users]), "exact")
        k = int(np.argmax(sol.utilization * ~variant.is_delay))
        print(
            f"{cores:>8} {users:>6} {sol.throughput[0]:>9.2f} {1e3 * sol.response_time[0]:>8.1f}"
            f"  {variant.station_names[k]} ({sol.utilization[k]:.3f})"
        )
