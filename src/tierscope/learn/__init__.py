"""Learning-based bottleneck identification (seed 000 §2.9, issue 8).

From many setups of a system swept through saturation (:mod:`.corpus`), observation windows
with short-window features and labels (:mod:`.features`), cross-validated with the thesis's
schemes (:mod:`.crossval`) on five classifiers (:mod:`.models`), scored (:mod:`.scores`,
:mod:`.evaluate`), saved (:mod:`.persist`) and applied to fresh metrics (:mod:`.classify`):
is the server side at its capacity (client / gray / server), and which tier limits it.
The layer reads run folders and tables; only :mod:`.corpus` drives the runner and the twin.
"""

from __future__ import annotations

from tierscope.learn.evaluate import evaluate
from tierscope.learn.features import Dataset, load_dataset

__all__ = ["Dataset", "evaluate", "load_dataset"]
