"""What a run folder's ``run.json`` records as its ``spec``, one typed document per kind of run.

Design decision: the writer of each kind of run builds the document from the model below and
the store parses it back with :func:`parse_run_spec` (``tierscope.store.Run.spec``), so every
reader gets a typed spec and none reads the JSON as a raw dict:

========================  =====================================================================
kind                      spec
========================  =====================================================================
``experiment``            :class:`~tierscope.spec.experiment.ExperimentSpec` (the user's spec,
                          as written, setups' overrides unapplied)
``simulation``            :class:`~tierscope.spec.model.Model` (the simulated queueing model)
``simulated-sweep``       :class:`SimulatedSweepSpec` (a sweep of models laid out as a run)
``import``                :class:`ImportSpec` (which files were imported, and their time origin)
``load``                  :class:`~tierscope.spec.workload.Workload` (one level of load)
========================  =====================================================================
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tierscope.errors import SpecError
from tierscope.spec.experiment import (
    ExperimentSpec,
    MonitorSpec,
    PhasesSpec,
    parse_experiment,
)
from tierscope.spec.model import Model, parse_model
from tierscope.spec.workload import Workload, parse_workload

RunKind = Literal["experiment", "simulation", "simulated-sweep", "import", "load"]
RUN_KINDS: tuple[str, ...] = get_args(RunKind)


class SimulatedSystem(BaseModel):
    model_config = ConfigDict(extra="ignore")

    kind: Literal["simulation"] = "simulation"
    tiers: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="the stations front to back"
    )


class SimulatedSetup(BaseModel):
    """A simulated setup (any name: it is the key of its model, never a folder)."""

    model_config = ConfigDict(extra="ignore")

    name: str
    plus_one_of: str | None = Field(
        None, description="this setup is the '+1 node' companion of that setup (margin M)"
    )


class SimulatedSweep(BaseModel):
    model_config = ConfigDict(extra="ignore")

    levels: list[float]
    repetitions: int = 1
    setups: list[SimulatedSetup] = Field(default_factory=list)


class SimulatedSweepSpec(BaseModel):
    """A load sweep of one or several simulated setups written as one run
    (``tierscope.sim.record_simulated_sweep``): shaped as an experiment spec where the readers
    of a sweep look (``sweep``, ``workload``, ``monitor``), with each setup's model."""

    model_config = ConfigDict(extra="ignore")

    name: str = "simulated-sweep"
    system: SimulatedSystem = Field(default_factory=SimulatedSystem)
    workload: dict[str, Any] = Field(default_factory=dict)
    sweep: SimulatedSweep
    phases: PhasesSpec = Field(default_factory=PhasesSpec)  # type: ignore[arg-type]
    monitor: MonitorSpec = Field(default_factory=MonitorSpec)  # type: ignore[arg-type]
    models: dict[str, Model] = Field(default_factory=dict)

    @property
    def workload_mode(self) -> str:
        return str(self.workload.get("mode", "closed"))


class ImportSpec(BaseModel):
    """Users' own data imported as a run (``tierscope import``)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    name: str = "import"
    format: str = Field("csv", description="the importer (tierscope import <format>)")
    files: dict[str, str] = Field(
        default_factory=dict, alias="import", description="table -> the file it came from"
    )
    time_origin: str | None = Field(
        None, description="the absolute time (ISO 8601) the run's time 0 stands for"
    )
    notes: list[str] = Field(
        default_factory=list, description="how the data was read (units, times, what was left)"
    )


RunSpec = ExperimentSpec | Model | SimulatedSweepSpec | ImportSpec | Workload


def parse_run_spec(kind: RunKind, doc: Any, *, source: str) -> RunSpec:
    """The typed spec of a run of ``kind``; :class:`SpecError` naming what does not fit."""
    if kind == "experiment":
        return parse_experiment(doc, source=source)
    if kind == "simulation":
        return parse_model(doc, source=source)
    if kind == "load":
        return parse_workload(doc, source=source)
    model = SimulatedSweepSpec if kind == "simulated-sweep" else ImportSpec
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        problems = [
            (".".join(str(p) for p in e["loc"]) or "spec", str(e["msg"])) for e in exc.errors()
        ]
        raise SpecError(source, problems) from None


def plus_one_pairs(spec: RunSpec | None) -> dict[str, str]:
    """{base setup: its "+1 node" companion} of a sweep (experiments and simulated sweeps)."""
    if not isinstance(spec, ExperimentSpec | SimulatedSweepSpec):
        return {}
    return {s.plus_one_of: s.name for s in spec.sweep.setups if s.plus_one_of is not None}


def workload_mode(spec: RunSpec | None) -> str | None:
    """``open`` or ``closed`` for a sweep's workload (None: the spec does not say)."""
    if isinstance(spec, ExperimentSpec | SimulatedSweepSpec):
        return spec.workload_mode
    return None


__all__ = [
    "RUN_KINDS",
    "ImportSpec",
    "RunKind",
    "RunSpec",
    "SimulatedSetup",
    "SimulatedSweep",
    "SimulatedSweepSpec",
    "parse_run_spec",
    "plus_one_pairs",
    "workload_mode",
]
