"""Find the bottleneck of a simulated three-tier sweep
=====================================================

A load sweep of the millibottleneck twin with a slower database (a capped tier), simulated and
written as one run folder, then analysed: where throughput saturates, which tier and resource
limit it, and which 300 ms stalls of the application tier cause the slowest requests.
"""

# %%
# Simulate the sweep: 20 to 200 users, 15 s steady per level, one run folder.
import tempfile
from pathlib import Path

from tierscope.analysis import AnalysisOptions, analyze
from tierscope.spec import load_model
from tierscope.store import read_run, record_simulated_sweep

here = Path(__file__).parent
twin = load_model(here / "models" / "millibottleneck-twin.yaml")
db = next(s for s in twin.classes[0].service if s == "db")
slow_db = twin.model_copy(
    update={
        "classes": [
            twin.classes[0].model_copy(update={"service": {**twin.classes[0].service, db: 0.004}})
        ]
    }
)
folder = Path(tempfile.mkdtemp()) / "sweep"
record_simulated_sweep(
    {"s0": slow_db}, folder, levels=[20, 60, 100, 140, 180, 220], steady=15, ramp_up=2
)

# %%
# Analyse it (requests slower than 0.25 s count as very long here).
doc = analyze(read_run(folder), AnalysisOptions(vlrt_s=0.25))
sat = doc["saturation"][0]
print(
    f"peak {sat['peak_throughput']:.0f}/s at {sat['peak_level']:g} users; "
    f"saturated from {sat['first_server_level']:g} users; knee at {sat['knee_level']:g}"
)
for b in doc["bottlenecks"]:
    p = b["primary"]
    where = "-" if p is None else f"{p['tier']}/{p['resource']} {b['primary_fraction']:.0%}"
    print(f"{b['level']:5g} users  {b['label']:<6}  {b['kind']:<10} {where}")

# %%
# The stalls: each a millibottleneck rooted in the application tier.
app = [e for e in doc["episodes"] if e["tier"] == "app"]
print(
    f"{len(app)} app episodes, root tiers {sorted({e['root_tier'] for e in app})}, "
    f"all shorter than 1 s: {all(e['kind'] == 'millibottleneck' for e in app)}"
)
v = doc["vlrt"]
print(
    f"{v['count']} requests >= {v['threshold_s']:g} s, "
    f"{v['explained_fraction']:.0%} of them during an episode"
)
