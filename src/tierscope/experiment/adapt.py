"""A live producer reconfigured while a staged network trace plays: Wu's dynamic configuration
(Algorithm 1, seed 002 §1.4) and reactive batching (Ch. 6), measured against static settings
over the same trace, on real brokers.

The trace is the spec's ``network`` faults (stages one after another on ``producer-brokers``,
as the thesis's Fig. 5.12 trace: Pareto delays, Bernoulli or Gilbert–Elliott losses), played
by the fault scheduler for ``phases.steady`` seconds while the producers offer
``sweep.levels[0]`` messages/s each and the consumers read along. Every ``control.interval``
seconds (and once before the first message) the controller reads the producer link's
condition — known ahead, as the thesis assumed: the mean one-way delay and stationary loss of
the fault playing then — and decides the producer's settings among ``control.candidates``:

* ``static``: the spec's settings throughout;
* ``dynamic``: Algorithm 1 (:func:`tierscope.domains.kafka_reliability.dynamic_configuration`)
  on the KPI γ = w1 φ + w2 μ + w3 (1 − P_l) + w4 (1 − P_d), each term predicted for the
  candidate settings and the condition by the predictor fitted to reliability rows
  (``tierscope kafka reliability``'s): φ the relative payload (the messages' value bytes
  over the bytes librdkafka sent to the brokers), μ the normalised service rate (acknowledged
  over sent), P_l and P_d the loss and duplicate rates;
* ``reactive``: the batch size of the highest predicted timely throughput
  χ' = (1 − η_v)(1 − η_l) χ (eq. 6.9), χ = rate · μ, η_v the late share at ``deadline_ms``, η_l
  the acknowledged-but-lost share (the thesis fitted a latency distribution per batch size
  under good conditions; here η_v is learned per batch size *and* network condition).

A decision that changes the settings is written to the producers' control file and they switch
at once (a new librdkafka producer takes over the schedule, the old one drains; see
:mod:`tierscope.load.kafka_worker`). Every message carries the configuration that sent it.

What is measured per window of ``control.interval`` seconds (messages by their intended send
time): offered, sent, acknowledged ok, lost (never read), duplicated (read twice or more), late,
timely (acknowledged within the deadline and read), φ from librdkafka's own counters (messages
transmitted, retries included, times their size, over the bytes sent, between its reports), μ,
P_l, P_d and the measured γ; per policy, the share of windows with γ at or above the target,
the aggregate loss and duplicate rates R_l and R_d (eq. 5.3 on the measured counts) and the
timely throughput.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tierscope.domains.kafka import kpi, reactive_batch_size
from tierscope.domains.kafka_reliability import ReliabilityModel, Step, dynamic_configuration
from tierscope.errors import InputError
from tierscope.experiment.faults import FaultScheduler, FaultTarget
from tierscope.experiment.reliability import configured_workload, fault_condition, measure_each
from tierscope.load.kafka import wire_counters, wire_totals, write_control
from tierscope.spec.experiment import ExperimentSpec
from tierscope.spec.kafka import ControlSpec

POLICIES = ("static", "dynamic", "reactive")
#: what each policy needs the predictor to have learned
NEEDS = {
    "static": (),
    "dynamic": ("relative_payload", "service_ratio", "loss_rate", "duplicate_rate"),
    "reactive": ("service_ratio", "late_rate", "acked_lost_rate"),
}
PRODUCER_LINK = "producer-brokers"

Condition = tuple[float, float]  # (mean one-way delay [s], packet loss probability)


def condition_at(spec: ExperimentSpec, t: float) -> Condition:
    """The producer link's condition at ``t`` seconds into the trace (the fault playing then;
    none: (0, 0))."""
    horizon = spec.phases.steady
    for f in spec.faults:
        playing = any(a <= t < b for a, b in f.windows(horizon))
        if f.kind == "network" and f.link == PRODUCER_LINK and playing:
            return fault_condition(f)
    return 0.0, 0.0


def start_config(spec: ExperimentSpec, control: ControlSpec) -> dict[str, Any]:
    """The spec's producer settings the controller may change (a poll interval never set is 0)."""
    p = spec.kafka_workload.producer
    values = {"acks": p.acks, "batch_messages": p.batch_messages, "timeout_ms": p.timeout_ms,
              "poll_ms": p.poll_ms or 0}  # fmt: skip
    return {k: values[k] for k in control.candidates}


class Controller:
    """Decides the producer settings for a network condition (see the module)."""

    def __init__(
        self,
        policy: str,
        spec: ExperimentSpec,
        control: ControlSpec,
        model: ReliabilityModel | None,
    ) -> None:
        if policy not in POLICIES:
            raise InputError("--policy", policy, "one of " + ", ".join(POLICIES))
        missing = [t for t in NEEDS[policy] if model is None or t not in model.targets]
        if missing:
            raise InputError(
                "--rows", "(none)" if model is None else "the rows given",
                f"reliability rows with {', '.join(missing)} for the {policy} policy "
                "(tierscope kafka reliability --json writes them)",
            )  # fmt: skip
        self.policy, self.control, self.model = policy, control, model
        self.workload = spec.kafka_workload
        self.rate = spec.sweep.level_values[0]

    def _predict(self, configs: list[Mapping[str, Any]], cond: Condition) -> dict[str, np.ndarray]:
        assert self.model is not None
        rows = pl.DataFrame(
            [{"message_size": self.workload.message_size,
              "timeliness_ms": self.control.deadline_ms, "delay_ms": cond[0] * 1000.0,
              "loss": cond[1], **{k: (str(v) if k == "acks" else v) for k, v in c.items()}}
             for c in configs]
        )  # fmt: skip
        p = self.workload.producer
        fixed = {"acks": str(p.acks), "batch_messages": p.batch_messages,
                 "timeout_ms": p.timeout_ms, "poll_ms": p.poll_ms or 0.0}  # fmt: skip
        missing = [f for f in self.model.features if f not in rows.columns]
        return self.model.predict(rows.with_columns(pl.lit(fixed[f]).alias(f) for f in missing))

    def kpi_terms(self, config: Mapping[str, Any], cond: Condition) -> tuple[float, ...]:
        """(φ, μ, P_l, P_d) predicted for ``config`` in ``cond``."""
        got = self._predict([config], cond)
        return tuple(float(got[k][0]) for k in NEEDS["dynamic"])

    def decide(self, current: dict[str, Any], cond: Condition) -> tuple[dict[str, Any], dict]:
        """The settings for ``cond`` from ``current``, and what the decision rested on."""
        if self.policy == "static":
            return current, {}
        if self.policy == "dynamic":
            c = self.control
            new, steps = dynamic_configuration(
                current, c.candidates, lambda cfg: self.kpi_terms(cfg, cond), c.target, c.weights
            )
            gamma = kpi(*self.kpi_terms(new, cond), weights=c.weights)
            return new, {"gamma_predicted": gamma, "steps": [_step(s) for s in steps]}
        sizes = self.control.candidates.get("batch_messages") or [current["batch_messages"]]
        trials = [current | {"batch_messages": b} for b in sizes]
        got = self._predict(trials, cond)
        table = {
            int(b): (self.rate * float(got["service_ratio"][i]), float(got["late_rate"][i]),
                     float(got["acked_lost_rate"][i]))
            for i, b in enumerate(sizes)
        }  # fmt: skip
        best, chi = reactive_batch_size(table)
        return current | {"batch_messages": best}, {"timely_throughput_predicted": chi}


def _step(s: Step) -> dict[str, Any]:
    return {"parameter": s.parameter, "value": s.value, "gamma": s.gamma}


def check(spec: ExperimentSpec, policies: list[str], *, source: str) -> ControlSpec:
    """InputError for what cannot be run (before anything is deployed); the control spec."""
    if spec.system.kind != "kafka":
        raise InputError("system.kind", spec.system.kind, "kafka", source=source)
    for p in policies:
        if p not in POLICIES:
            raise InputError("--policy", p, "one of " + ", ".join(POLICIES), source=source)
    control = spec.control or ControlSpec()
    start = start_config(spec, control)
    for key, value in start.items():
        if value not in control.candidates[key]:
            raise InputError(f"workload.producer.{key}", value,
                             f"one of control.candidates.{key} {control.candidates[key]} "
                             "(the controller starts there)", source=source)  # fmt: skip
    return control


def run_policies(
    spec: ExperimentSpec,
    policies: list[str],
    model: ReliabilityModel | None,
    *,
    seed: int = 1,
    source: str = "<spec>",
) -> dict[str, Any]:
    """Each policy over the spec's trace, one after the other on one deployed cluster, with
    the same arrivals (``seed``)."""
    from tierscope.experiment.runner import deployed_system

    control = check(spec, policies, source=source)
    controllers = [Controller(p, spec, control, model) for p in policies]
    stage = f"playing the trace under {len(controllers)} policy(ies)"
    with deployed_system(spec.system, source=source) as (dep, run_id):
        # every policy with the same arrivals (one seed)
        runs, status = measure_each(controllers, stage,
                                    lambda i, c: play(dep, run_id, spec, c, seed=seed))  # fmt: skip
    return {
        "rate": spec.sweep.level_values[0],
        "duration_s": spec.phases.steady,
        "interval_s": control.interval,
        "target": control.target,
        "weights": list(control.weights),
        "deadline_ms": control.deadline_ms,
        "cluster": dep.facts,
        "runs": runs,
        **status,
    }


def play(dep: Any, run_id: str, spec: ExperimentSpec, controller: Controller, *, seed: int
         ) -> dict[str, Any]:  # fmt: skip
    """One policy over the trace on the running deployment ``dep``."""
    control, rate, length = controller.control, controller.rate, spec.phases.steady
    config = start_config(spec, control)
    config, why = controller.decide(config, condition_at(spec, 0.0))
    versions = [config]
    decisions = [_decision(0.0, condition_at(spec, 0.0), config, 0, why)]
    load = dep.driver.generator(configured_workload(spec, config), seed=seed,
                                request_id_prefix=f"{controller.policy}/")  # fmt: skip
    path = Path(load.workdir) / f"control-{controller.policy}-{uuid.uuid4().hex[:8]}.json"
    handle = load.start(rate, 0.0, length, 0.0, setup=controller.policy, control=path)
    targets = [FaultTarget(n.tier, n.name, n.replica, n.pids, n.cgroup) for n in dep.nodes]
    faults = FaultScheduler(spec.faults, targets, length, links=dep.links, tag=run_id)
    faults.start(handle.t0)
    try:
        k = 1
        while not handle.done:
            t = time.monotonic() - handle.t0
            if t >= k * control.interval and k * control.interval < length:
                cond = condition_at(spec, k * control.interval)
                new, why = controller.decide(config, cond)
                if new != config:
                    before = configured_workload(spec, config)
                    config = new
                    versions.append(config)
                    write_control(path, len(versions) - 1, configured_workload(spec, config),
                                  before)  # fmt: skip
                decisions.append(_decision(t, cond, config, len(versions) - 1, why))
                k += 1
            handle.snapshot()
            time.sleep(0.05)
    except BaseException:
        faults.stop()
        handle.stop()
        raise
    occurrences = faults.stop()
    result = handle.wait()
    windows = measure_windows(result.requests, wire_counters(handle), handle.t0, length, control,
                              versions, lambda t: condition_at(spec, t),
                              controller.workload.message_size)  # fmt: skip
    return {
        "policy": controller.policy,
        "decisions": decisions,
        "windows": windows,
        "summary": summarise(windows, result.requests, handle.t0, length),
        "reconfigurations": len(versions) - 1,
        "faults": [
            {
                "kind": o.kind,
                "target": o.node,
                "start": o.t_start - handle.t0,
                "end": o.t_end - handle.t0,
                **o.detail,
            }
            for o in occurrences
        ],
        "client_bottleneck": result.summary.get("client_bottleneck"),
        **({"failure": result.summary["failure"]} if result.summary.get("failure") else {}),
    }


def _decision(t: float, cond: Condition, config: dict[str, Any], version: int,
              why: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    return {"t": round(t, 3), "delay_ms": cond[0] * 1000.0, "loss": cond[1], "version": version,
            "config": dict(config), **why}  # fmt: skip


def measure_windows(
    requests: pl.DataFrame,
    counters: pl.DataFrame,
    t0: float,
    length: float,
    control: ControlSpec,
    versions: list[dict[str, Any]],
    condition: Callable[[float], Condition],
    message_size: int,
) -> list[dict[str, Any]]:
    """The measured KPI terms and timely throughput of each window of the trace (see the
    module); ``requests`` have monotonic times, ``t0`` is the trace's start."""
    deadline, width = control.deadline_ms / 1000.0, control.interval
    req = requests.with_columns(
        ((pl.col("start") - t0) / width).floor().cast(pl.Int64).alias("window"),
        (pl.col("status") == "ok").alias("ok"),
        (pl.col("end") - pl.col("start")).alias("latency"),
        pl.col("copies").fill_null(0),
    )
    out = []
    n = int(np.ceil(length / width - 1e-9))
    for k in range(n):
        a, b = k * width, min((k + 1) * width, length)
        w = req.filter(pl.col("window") == k)
        sent = w.filter(pl.col("actual_start").is_not_null())
        ok = w.filter(pl.col("ok"))
        lost = int((sent["copies"] == 0).sum())
        duplicated = int((sent["copies"] > 1).sum())
        late = int((ok["latency"] > deadline).sum())
        timely = int(((ok["latency"] <= deadline) & (ok["copies"] > 0)).sum())
        before, after = wire_totals(counters, t0 + a), wire_totals(counters, t0 + b)
        tx_bytes = after["tx_bytes"] - before["tx_bytes"]
        payload = (after["txmsgs"] - before["txmsgs"]) * message_size
        # nothing on the wire while messages were sent (all stuck in the producer's queue)
        phi = payload / tx_bytes if tx_bytes > 0 else (0.0 if sent.height else None)
        mu = ok.height / w.height if w.height else None
        p_l = lost / sent.height if sent.height else None
        p_d = duplicated / sent.height if sent.height else None
        gamma = (kpi(phi, mu, p_l, p_d, weights=control.weights)
                 if None not in (phi, mu, p_l, p_d) else None)  # fmt: skip
        version = int(w["config"].mode().min()) if w.height else None  # type: ignore[arg-type]
        delay, loss = condition((a + b) / 2)
        out.append({
            "t": a, "seconds": b - a, "delay_ms": delay * 1000.0, "loss": loss,
            "version": version, "config": None if version is None else versions[version],
            "offered": w.height, "sent": sent.height, "ok": ok.height, "lost": lost,
            "duplicated": duplicated, "late": late, "timely": timely,
            "relative_payload": phi, "service_ratio": mu, "loss_rate": p_l,
            "duplicate_rate": p_d, "gamma": gamma,
            "meets_target": None if gamma is None else gamma >= control.target,
            "timely_throughput": timely / (b - a),
        })  # fmt: skip
    return out


def summarise(
    windows: list[dict[str, Any]],
    requests: pl.DataFrame,
    t0: float,
    length: float,
) -> dict[str, Any]:
    """A policy's figures over the whole trace."""
    scored = [w for w in windows if w["gamma"] is not None]
    req = requests.filter(pl.col("start") < t0 + length)
    sent = req.filter(pl.col("actual_start").is_not_null())
    copies = sent["copies"].fill_null(0)
    n = sent.height
    return {
        "messages": n,
        "time_at_target": (sum(w["seconds"] for w in scored if w["meets_target"])
                           / sum(w["seconds"] for w in scored)) if scored else None,
        "gamma_mean": float(np.mean([w["gamma"] for w in scored])) if scored else None,
        "loss_rate": int((copies == 0).sum()) / n if n else None,
        "duplicate_rate": int((copies > 1).sum()) / n if n else None,
        "timely_throughput": sum(w["timely"] for w in windows) / length,
    }  # fmt: skip


__all__ = ["POLICIES", "Controller", "check", "condition_at", "measure_windows", "play",
           "run_policies", "start_config", "summarise"]  # fmt: skip
