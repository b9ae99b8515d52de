"""Queueing-network models and their analytic solvers.

``solve(Network.from_model(model), method)`` runs any registered method (see ``METHODS``);
single-station closed forms live in :mod:`tierscope.qn.queues`, fork-join formulas in
:mod:`tierscope.qn.forkjoin` and the Universal Scalability Law in :mod:`tierscope.qn.usl`.
"""

from __future__ import annotations

from tierscope.qn.bounds import BoundsResult
from tierscope.qn.forkjoin import (
    exp_order_stat_mean,
    nelson_tantawi_2way,
    nelson_tantawi_kway,
    quorum_fork_join_mm1,
    quorum_wait,
)
from tierscope.qn.network import Network
from tierscope.qn.queues import QUEUE_KINDS, QueueMetrics, mg1, mg1ps, mm1, mmm, mmmk
from tierscope.qn.result import Solution, consistency_errors
from tierscope.qn.solvers import METHODS, choose_method, solve
from tierscope.qn.usl import UslFit, fit_usl

__all__ = [
    "METHODS",
    "QUEUE_KINDS",
    "BoundsResult",
    "Network",
    "QueueMetrics",
    "Solution",
    "UslFit",
    "choose_method",
    "consistency_errors",
    "exp_order_stat_mean",
    "fit_usl",
    "mg1",
    "mg1ps",
    "mm1",
    "mmm",
    "mmmk",
    "nelson_tantawi_2way",
    "nelson_tantawi_kway",
    "quorum_fork_join_mm1",
    "quorum_wait",
    "solve",
]
