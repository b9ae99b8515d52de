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
from tierscope.sim import record_simulated_sweep
from tierscope.spec import load_model
from tierscope.store import read_run

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
# The stalls (the ground truth in events.parquet): each is found as an application-tier
# millibottleneck that starts during the stall, rooted in the application tier. Other app
# episodes, if any, are queues pushed back from a saturating database.
stalls = read_run(folder).events.filter(kind="stall").rows(named=True)
app = [e for e in doc["episodes"] if e["tier"] == "app"]
found = [
    next((e for e in app if s["t_start"] - 0.05 <= e["start"] <= s["t_end"]), None) for s in stalls
]
hits = [e for e in found if e is not None]
roots = sorted({e["root_tier"] for e in hits})
print(
    f"{len(hits)} of {len(stalls)} stalls found, root tiers {roots}, "
    f"all shorter than 1 s: {all(e['kind'] == 'millibottleneck' for e in hits)}"
)
others = [e for e in app if all(e is not h for h in hits)]
print(f"{len(others)} other app episodes, root tiers {sorted({e['root_tier'] for e in others})}")
v = doc["vlrt"]
print(
    f"{v['count']} requests >= {v['threshold_s']:g} s, "
    f"{v['explained_fraction']:.0%} of them during an episode"
)
