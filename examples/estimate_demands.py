"""Which request costs what? Service demands from measurements
=============================================================

Twenty 1-minute windows of a web shop: the throughput of two request classes (``browse`` and
``buy``), the utilisation of its CPU and disk, and the mean response time of each class. The
demands that produced them are known here (the data are generated below with 3 % measurement
noise), so the estimates can be checked: utilisation-based regression (UBR), Liu et al.'s
utilisation-based optimisation (UBO) and the response-time maximum likelihood (MLE).

MLE sees no utilisations: from end-to-end response times alone it cannot tell which of the two
stations a class's demand belongs to (they enter the response time alike), only how much there
is in total — the last lines show what it gets right.
"""

# %%
# Generate the windows: a changing class mix, open processor-sharing response times.
import numpy as np

from tierscope.estimate import Observations, choose_method, estimate

rng = np.random.default_rng(42)
truth = np.array([[0.010, 0.030], [0.004, 0.020]])  # [station, class] seconds per request
X = np.column_stack([rng.uniform(5, 25, 20), rng.uniform(2, 10, 20)])  # requests/s
U = X @ truth.T
R = (truth[None, :, :] / (1 - U)[:, :, None]).sum(axis=1)
noisy = Observations(
    classes=("browse", "buy"),
    stations=("cpu", "disk"),
    throughput=X,
    servers=np.ones(2),
    utilization=U * rng.normal(1, 0.03, U.shape),
    response_time=R * rng.normal(1, 0.03, R.shape),
)

# %%
# Estimate with each method and compare with the truth; ``auto`` says what it would use.
print("auto:", choose_method(noisy)[0])
print(f"{'method':<6} {'station':<7} {'class':<7} {'estimate':>9} {'truth':>7} {'95% CI':>19}")
for method in ("ubr", "ubo"):
    est = estimate(noisy, method, n_boot=100, seed=1)
    for k, st in enumerate(noisy.stations):
        for c, cl in enumerate(noisy.classes):
            lo, hi = est.ci_low_[k, c], est.ci_high_[k, c]
            print(
                f"{method:<6} {st:<7} {cl:<7} {est.demands_[k, c]:>9.4f} {truth[k, c]:>7.3f} "
                f"[{lo:.4f}, {hi:.4f}]"
            )

# %%
# MLE: the two stations are exchangeable in the response times, so the likelihood has two equal
# maxima, the stations' demands swapped, and which one the search ends in is arbitrary (it
# differs between CPUs). What it does identify: each class's two demands as a pair, and their
# total.
mle = estimate(noisy, "mle", n_boot=0)
for c, cl in enumerate(noisy.classes):
    pair, true_pair = np.sort(mle.demands_[:, c]), np.sort(truth[:, c])
    print(
        f"mle {cl:<7} demands {pair[0]:.4f} and {pair[1]:.4f} (truth {true_pair[0]:.3f} and "
        f"{true_pair[1]:.3f}), total {pair.sum():.4f} (truth {true_pair.sum():.3f})"
    )
