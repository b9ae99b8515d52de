"""The application layer: each pipeline of tierscope written once, for the CLI and for Python.

``cli.py`` parses arguments, calls one function here and prints the document it returns;
users' Python calls the same functions and gets the same documents (what ``--json`` prints)
and the same files. Only this module wires the layers together: spec -> experiment -> store ->
analysis / estimate / plan / learn -> report.

Every function takes paths and plain values, returns a JSON-ready document, and raises
:class:`tierscope.errors.InputError` (exit status 2 in the CLI) for bad input. Long work reports
its progress through :mod:`tierscope.progress` (the CLI draws bars from it on a terminal).

Example::

    from tierscope import workflows
    from tierscope.spec.experiment import load_experiment

    summary = workflows.run_sweep(*load_experiment("examples/demo.yaml"), "runs/demo")
    print(summary["analysis"]["bottlenecks"][-1]["primary"])
    print(workflows.whatif_run("runs/demo", ["db.cpu=0.6"])["curves"])
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tierscope.errors import InputError

if TYPE_CHECKING:
    from tierscope.spec.experiment import ExperimentSpec

PathLike = str | os.PathLike[str]


# ---- measuring: run, demo, import ------------------------------------------------------------
def run_sweep(
    spec: ExperimentSpec,
    doc: dict[str, Any],
    out_dir: PathLike | None = None,
    *,
    source: str = "<spec>",
    progress: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """Deploy the system of ``spec`` (and its document ``doc``, from
    :func:`tierscope.spec.experiment.load_experiment`), sweep its load into ``out_dir``
    (default :func:`default_run_dir`), then analyse the run (analysis.json, report.html): the
    run's summary (``run_dir`` names the folder) with its ``analysis``. ``progress`` gets the
    runner's state after every step (the CLI's live view)."""
    from tierscope.experiment import run_experiment

    target = Path(out_dir) if out_dir is not None else default_run_dir(spec.name)
    summary = run_experiment(spec, doc, target, source=source, progress=progress)
    summary["analysis"] = analyse_run(target, report=True)
    return summary


def default_run_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def import_run(
    out_dir: PathLike,
    *,
    metrics: PathLike | None = None,
    requests: PathLike | None = None,
    points: PathLike | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Write users' CSV files as a run folder; what was imported. ``force``: replace a run
    folder's own files (nothing else in the folder)."""
    from tierscope.ingest.csv import import_csv

    return _imported(
        import_csv(out_dir, metrics=metrics, requests=requests, points=points, force=force)
    )


def import_data(
    fmt: str, out_dir: PathLike, files: Sequence[PathLike], **options: Any
) -> dict[str, Any]:
    """Files another tool wrote, in format ``fmt`` (``metrics``: long or wide metric tables;
    ``prometheus``: query_range results; the load tools' and tracers' formats of
    :data:`tierscope.ingest.FORMATS`), written as a run folder; what was imported and how it
    was read (``notes``). ``options``: those of :func:`tierscope.ingest.import_metrics`,
    :func:`tierscope.ingest.import_prometheus` or :func:`tierscope.ingest.import_files`
    (``baseline``, ``cpu_limit``, ``graph``, ...)."""
    from tierscope import ingest

    importers = {"metrics": ingest.import_metrics, "prometheus": ingest.import_prometheus}
    if fmt in importers:
        path, _ = importers[fmt](out_dir, files, **options)
    elif fmt in ingest.FORMATS:
        path, _ = ingest.import_files(fmt, out_dir, files, **options)
    else:
        raise InputError("format", fmt, "one of " + ", ".join([*importers, *ingest.FORMATS]))
    return _imported(path)


def _imported(path: Path) -> dict[str, Any]:
    from tierscope.spec.runs import ImportSpec
    from tierscope.store import read_run

    run = read_run(path)
    spec = run.spec if isinstance(run.spec, ImportSpec) else None
    return {
        "run_dir": str(path),
        "tables": run.info.get("tables", []),
        "rows": {
            t: getattr(run, t).height
            for t in ("metrics", "requests", "points")
            if getattr(run, t) is not None
        },
        "components": list(run.graph.names),
        "time_origin": spec.time_origin if spec else None,
        "notes": spec.notes if spec else [],
    }


# ---- models: solve, simulate, single queues, USL -------------------------------------------
def solve_model(
    model_file: PathLike,
    method: str = "auto",
    *,
    tol: float | None = None,
    max_iter: int | None = None,
) -> tuple[dict[str, Any], str]:
    """Solve the queueing-network model of ``model_file`` with ``method`` (PRODUCT.md §4.2):
    the solution document and the model's title."""
    from tierscope.qn import METHODS, Network, solve
    from tierscope.spec import load_model

    if method != "auto" and method not in METHODS:
        raise InputError("--method", method, "one of " + ", ".join(("auto", *METHODS)))
    options: dict[str, Any] = {}
    if tol is not None or max_iter is not None:
        if method not in ("amva", "linearizer"):
            raise InputError("--tol/--max-iter", method, "method amva or linearizer")
        if tol is not None:
            options["tol"] = tol
        if max_iter is not None:
            options["max_iter"] = max_iter
    model = load_model(model_file)
    doc = solve(Network.from_model(model), method, **options).to_dict()
    return doc, model.name or Path(model_file).name


def simulate_model(
    model_file: PathLike, *, trace: PathLike | None = None, **options: Any
) -> tuple[dict[str, Any], str]:
    """Simulate the model of ``model_file`` (``options``: those of
    :func:`tierscope.sim.simulate`): the result document (with confidence intervals) and the
    model's title; with ``trace``, also a run folder of it (what was measured is kept there if
    interrupted)."""
    from tierscope.sim import record_simulation, simulate
    from tierscope.spec import load_model

    model = load_model(model_file)
    if trace is None:
        result = simulate(model, **options)
    else:
        result = record_simulation(model, trace, source=str(model_file), **options)
    return result.to_dict(), model.name or Path(model_file).name


def queue_metrics(
    kind: str,
    arrival_rate: float,
    service_time: float | None = None,
    *,
    servers: int | None = None,
    capacity: int | None = None,
    scv: float | None = None,
    ph: PathLike | None = None,
) -> dict[str, Any]:
    """Metrics of one queue of ``kind`` (mm1, mmm, mmmk, mg1, mg1ps; mph1 with the service's
    phase-type distribution from the JSON file ``ph``); a parameter the kind needs must be
    given, one it does not take must not. ``queue_length``: jobs in the system (L)."""
    import inspect

    from tierscope.qn.phase_type import mph1, read_phase_type
    from tierscope.qn.queues import QUEUE_KINDS

    kinds = {**QUEUE_KINDS, "mph1": mph1}
    if kind not in kinds:
        raise InputError("--kind", kind, "one of " + ", ".join(kinds))
    fn = kinds[kind]
    accepted = set(inspect.signature(fn).parameters)
    given = {"service_time": service_time, "servers": servers, "capacity": capacity, "scv": scv,
             "ph": ph}  # fmt: skip
    kwargs: dict[str, Any] = {"arrival_rate": arrival_rate}
    for name, value in given.items():
        flag = "--" + name.replace("_", "-")
        if name in accepted:
            if value is None:
                raise InputError(flag, None, f"a value (required by --kind {kind})")
            kwargs[name] = read_phase_type(value) if name == "ph" else value
        elif value is not None:
            raise InputError(flag, value, f"not given (it does not apply to {kind})")
    doc = dict(fn(**kwargs).to_dict())
    return doc | {"queue_length": doc["mean_number"]}


def fit_phase_type(
    samples: PathLike, phases: int, *, column: str | None = None, branches: int = 4
) -> dict[str, Any]:
    """A hyper-Erlang phase-type distribution of ``phases`` phases fitted (EM) to the times in
    the CSV ``samples``, with a Gamma fit beside it."""
    from tierscope.estimate.ph import fit_hyper_erlang, read_samples

    return fit_hyper_erlang(read_samples(samples, column), phases, branches=branches).to_dict()


def kafka_reliability(
    spec_file: PathLike, overrides: Sequence[str] = (), *, messages: int | None = None
) -> dict[str, Any]:
    """Loss and duplication counted on real brokers for every configuration of the spec's
    ``sweep.grid`` (the thesis's TRAK protocol; :mod:`tierscope.experiment.reliability`):
    ``{"rows": [...]}``, one row per configuration."""
    from tierscope.experiment.reliability import DEFAULT_MESSAGES, measure
    from tierscope.spec.experiment import load_experiment

    spec, _ = load_experiment(spec_file, list(overrides))
    return measure(spec, messages=messages or DEFAULT_MESSAGES, source=str(spec_file))


def kafka_adapt(
    spec_file: PathLike,
    overrides: Sequence[str] = (),
    *,
    policies: Sequence[str] = (),
    rows_file: PathLike | None = None,
    method: str = "gbm",
    seed: int = 1,
) -> dict[str, Any]:
    """The spec's producer played over its staged network trace under each policy (default:
    ``control.policy``), reconfigured live (:mod:`tierscope.experiment.adapt`); the dynamic and
    reactive policies predict with a model fitted to ``rows_file`` (reliability rows)."""
    from tierscope.domains.kafka_reliability import fit_reliability, read_rows
    from tierscope.experiment.adapt import check, run_policies
    from tierscope.spec.experiment import load_experiment

    spec, _ = load_experiment(spec_file, list(overrides))
    chosen = list(policies) or [(spec.control.policy if spec.control else "dynamic")]
    check(spec, chosen, source=str(spec_file))
    model = None
    if rows_file is not None:
        model = fit_reliability(read_rows(rows_file), method=method, seed=seed)
    return run_policies(spec, chosen, model, seed=seed, source=str(spec_file))


def kafka_throughput(
    spec_file: PathLike, overrides: Sequence[str] = (), *, messages: int | None = None
) -> dict[str, Any]:
    """Producer throughput at full load for every configuration of ``sweep.grid``, and Wu's
    throughput model calibrated on them, each predicted when left out
    (:mod:`tierscope.experiment.kafka_throughput`)."""
    from tierscope.experiment.kafka_throughput import DEFAULT_MESSAGES, measure
    from tierscope.spec.experiment import load_experiment

    spec, _ = load_experiment(spec_file, list(overrides))
    return measure(spec, messages=messages or DEFAULT_MESSAGES, source=str(spec_file))


def kafka_learn(
    rows_file: PathLike, *, method: str = "gbm", folds: int = 5, seed: int = 1
) -> dict[str, Any]:
    """The loss/duplication predictor cross-validated on producer configurations it never saw,
    against the constant baseline, from reliability rows (``kafka reliability --json``'s
    document, or a CSV of its rows)."""
    from tierscope.domains.kafka_reliability import cross_validate, read_rows

    return cross_validate(read_rows(rows_file), method=method, folds=folds, seed=seed)


def usl_file(data: PathLike) -> dict[str, Any]:
    """The Universal Scalability Law fitted to a CSV of ``concurrency,throughput``."""
    from tierscope.qn.usl import fit_usl, read_usl_csv

    n, x = read_usl_csv(Path(data))
    return dict(fit_usl(n, x).to_dict())


# ---- load ----------------------------------------------------------------------------------
def offer_load(
    target: str,
    *,
    workload: dict[str, Any] | None = None,
    base_urls: Sequence[str] = (),
    warmup: float = 0.0,
    duration: float = 10.0,
    ramp_down: float = 0.0,
    seed: int = 1,
    connections: int | None = None,
    threads: int = 1,
    timeout: float = 10.0,
    max_outstanding: int | None = None,
    priority: str = "realtime",
    out: PathLike | None = None,
    on_progress: Callable[[Any], None] | None = None,
) -> tuple[dict[str, Any], str]:
    """Offer HTTP load to ``target`` (a URL or a workload file; ``workload``: the options of
    :func:`tierscope.load.options.workload_from_options`, users, rate, think time, mode, ...)
    for ``warmup + duration + ramp_down`` seconds: the load summary (latency free of
    coordinated omission, the client-bottleneck verdict) and the workload's name. With ``out``
    a run folder is written as the load runs. ``on_progress(handle)`` about four times a
    second. Interrupted (Ctrl-C), the summary of what ran is returned (``partial``) without a
    run folder, and KeyboardInterrupt propagates with one (what was measured is kept there)."""
    from tierscope.load import LoadGenerator, record_load
    from tierscope.load.options import workload_from_options

    load, level, source = workload_from_options(target, **(workload or {}))
    gen = LoadGenerator(
        load,
        base_urls,
        seed=seed,
        connections=connections,
        timeout_s=timeout,
        threads=threads,
        max_outstanding=max_outstanding,
        keep_requests=out is None,
        priority=priority,
    )
    if out is None:
        handle = gen.start(level, warmup, duration, ramp_down)
        try:
            while not handle.join(0.25):
                if on_progress is not None:
                    on_progress(handle)
            result = handle.wait()
        except KeyboardInterrupt:
            result = handle.stop()
    else:
        options = {"target": target, "level": level, "warmup": warmup, "duration": duration,
                   "ramp_down": ramp_down, "connections": connections, "threads": threads,
                   "timeout": timeout}  # fmt: skip
        result = record_load(
            gen, out, level=level, ramp_up_s=warmup, steady_s=duration, ramp_down_s=ramp_down,
            options=options, on_progress=on_progress,
        )  # fmt: skip
    return result.summary, load.name or source


# ---- analysis and report ---------------------------------------------------------------------
def analysis_options(
    pairs: Sequence[str] | None = None, base: dict[str, Any] | None = None, **given: Any
) -> Any:
    """AnalysisOptions from ``base`` (e.g. a previous analysis's), keyword values (None: not
    given) and ``KEY=VALUE`` pairs, validated."""
    from tierscope.spec.analysis import AnalysisOptions

    data: dict[str, Any] = dict(base or {})
    data.update({k: v for k, v in given.items() if v is not None})
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(
                "--option", pair, "KEY=VALUE (an analysis option, see docs/analysis.md)"
            )
        data[key.strip().replace("-", "_")] = value.strip()
    return AnalysisOptions.parse(data, source="analysis options")


def analyse_run(
    run_dir: PathLike, options: Any = None, *, write: bool = True, report: bool = False
) -> dict[str, Any]:
    """The analysis document of a run folder; written as analysis.json unless ``write`` is
    false, with report.html too when ``report``."""
    from tierscope.analysis import analyze
    from tierscope.store import read_run, write_analysis

    run = read_run(run_dir)
    options = options or analysis_options()
    doc = analyze(run, options)
    if write:
        write_analysis(run.path, doc)
    if report:
        _write_report(run, doc, options)
    return doc


def report_run(
    run_dir: PathLike,
    pairs: Sequence[str] | None = None,
    *,
    out_file: PathLike | None = None,
    model: PathLike | None = None,
) -> Path:
    """Analyse a run again (with its previous analysis's options and ``pairs`` over them),
    write analysis.json and the HTML report (with a learned model's indicators if ``model``);
    the report's path."""
    from tierscope.analysis import analyze
    from tierscope.store import read_analysis, read_run, write_analysis

    run = read_run(run_dir)
    previous = read_analysis(run.path) or {}
    options = analysis_options(pairs, base=previous.get("options"))
    doc = analyze(run, options)
    write_analysis(run.path, doc)
    return _write_report(run, doc, options, out_file=out_file, model=model)


def _write_report(
    run: Any,
    doc: dict[str, Any],
    options: Any,
    *,
    out_file: PathLike | None = None,
    model: PathLike | None = None,
) -> Path:
    from tierscope.analysis.series import report_series
    from tierscope.report.html import render
    from tierscope.store import read_calibration, write_report

    title = f"tierscope report: {run.name}"
    learned = None
    if model is not None:
        from tierscope.learn.classify import learned_indicators
        from tierscope.learn.persist import load

        learned = learned_indicators(load(Path(model)), run, doc)
    page = render(
        doc,
        report_series(run, options),
        title,
        learned,
        read_calibration(run.path),
        graph=run.graph.to_json(),
    )
    return Path(write_report(run.path, page, None if out_file is None else Path(out_file)))


def _is_cassandra(run: Any) -> bool:
    """A run of the cassandra target (its model is Dipietro's, :mod:`tierscope.plan.cassandra`)."""
    if run.points is None or run.points.height == 0:
        return False
    return bool(run.setup(run.points["setup"][0]).system.kind == "cassandra")


def read_run_dir(run_dir: PathLike) -> Any:
    """The run in ``run_dir`` (InputError naming it when it is not a run folder)."""
    from tierscope.store import read_run

    if not Path(run_dir).is_dir():
        raise InputError("RUN_DIR", str(run_dir), "a run folder (written by tierscope run)")
    return read_run(run_dir)


# ---- models from measurements: estimate, calibrate, whatif, plan -------------------------------
def estimate_input(
    input_path: PathLike,
    method: str = "auto",
    *,
    classes: str = "all",
    window: float = 1.0,
    setup: str | None = None,
    **params: Any,
) -> dict[str, Any]:
    """Service demands with intervals from a run folder or a CSV of observation windows;
    ``params``: the estimator's (``n_boot``, ``confidence``, ``seed``; SD's ``k_states``,
    ``states``, ``search``, ``divergence``, ``delta``, used only when SD is chosen)."""
    from tierscope.estimate import (
        ESTIMATORS,
        METHOD_NAMES,
        Observations,
        choose_method,
        estimate,
        observations_from_run,
    )
    from tierscope.estimate._data import demands_doc
    from tierscope.spec.observations import load_observations_csv

    if method not in METHOD_NAMES:
        raise InputError("--method", method, "one of " + ", ".join(METHOD_NAMES))
    path = Path(input_path)
    if path.is_dir():
        data = observations_from_run(read_run_dir(path), window=window, by=classes, setup=setup)
    elif path.is_file():
        layout, columns = load_observations_csv(path)
        data = Observations.from_table(layout, columns, source=str(path))
    else:
        raise InputError("INPUT", str(path), "an existing run folder or CSV file")
    chosen = choose_method(data)[0] if method == "auto" else method
    sd_only = ("k_states", "states", "search", "divergence", "delta", "starts")
    given = {k: v for k, v in params.items() if chosen == "sd" or k not in sd_only}
    result = estimate(data, method, **given)
    doc = result.to_dict()
    if isinstance(result, ESTIMATORS["sd"]):
        doc["sd"] = {
            "states_kept": result.states_kept_,
            "divergence": result.objective_,
            "run_time_s": result.run_time_,
            "marginals": {"sd": result.divergences(data, result.demands_)},
        }
        if data.records is not None:  # beside complete information's demands (seed 004 §9.3)
            ci = ESTIMATORS["ci"](n_boot=0).fit(data)
            doc["sd"]["marginals"]["ci"] = result.divergences(data, ci.demands_)
            doc["sd"]["ci_demands"] = demands_doc(data.stations, data.classes, ci.demands_)
    return doc


def calibrate_run(
    run_dir: PathLike,
    out_file: PathLike | None = None,
    *,
    setup: str | None = None,
    solver: str = "auto",
    window: float = 1.0,
    duration: float = 300.0,
    seed: int = 1,
) -> dict[str, Any]:
    """Build the run's queueing model, write it (default RUN_DIR/model.yaml) with
    calibration.json beside it, and compare it with every measured level."""
    import yaml

    from tierscope.plan import calibrate, model_vs_measurement

    run = read_run_dir(run_dir)
    target = Path(out_file) if out_file is not None else run.path / "model.yaml"
    if _is_cassandra(run):
        from tierscope.plan.cassandra import calibrate_cassandra

        cal_c = calibrate_cassandra(run, setup=setup, seed=seed)
        doc, model_doc, figure = cal_c.to_dict(), cal_c.model_document(), cal_c.figure()
    else:
        cal = calibrate(
            run, setup=setup, window=window, solver=solver, duration=duration, seed=seed
        )
        doc, model_doc, figure = cal.to_dict(), cal.model_document(), model_vs_measurement(cal)
    doc |= {"model_file": str(target)}
    # beside the model: the validation, and the columns of a "model vs measurement" figure
    record = target.with_name("calibration.json")
    try:
        target.write_text(yaml.safe_dump(model_doc, sort_keys=False))
        record.write_text(json.dumps(doc | {"figure": figure}, indent=1, allow_nan=False))
    except OSError as exc:
        raise InputError("--out", str(target), f"a writable file ({exc.strerror})") from None
    if record.parent.resolve() == run.path.resolve():
        doc["notes"] = [
            *doc["notes"],
            (f"`tierscope report {run.path}` adds the model to the report"),
        ]
    return doc


def whatif_run(
    run_dir: PathLike,
    changes: Sequence[str] = (),
    levels: Sequence[int] | None = None,
    *,
    setup: str | None = None,
    solver: str = "auto",
    duration: float = 300.0,
    seed: int = 1,
) -> dict[str, Any]:
    """The run's calibrated model with ``changes`` (``db.servers=2``, ``app.cpu=1.0``, ...)
    predicted at ``levels`` (default: the measured ones) beside the measured curve."""
    from tierscope.plan import fit_model, measured_levels, whatif

    run = read_run_dir(run_dir)
    if _is_cassandra(run):
        from tierscope.plan.cassandra import calibrate_cassandra, cassandra_whatif

        cal_c = calibrate_cassandra(run, setup=setup, seed=seed, validate=False)
        own = run.points.filter(run.points["setup"] == cal_c.setup)
        seen = {
            round(r["level"]): {"throughput": r["throughput"], "rt_mean": r["rt_mean"]}
            for r in own.iter_rows(named=True)
        }
        return cassandra_whatif(
            cal_c, list(changes), list(levels or sorted(seen)), measured=seen, seed=seed
        )
    model, _, _ = fit_model(run, setup=setup, solver=solver, seed=seed)
    chosen = setup or run.points["setup"][0]
    measured = {
        round(r["level"]): {
            "throughput": r["throughput"],
            "rt_mean": r["rt_mean"],
            "rt_p95": r["rt_p95"],
        }
        for r in measured_levels(run, chosen).iter_rows(named=True)
    }
    result = whatif(
        model,
        list(changes),
        list(levels or sorted(measured)),
        solver=solver,
        duration=duration,
        seed=seed,
        measured={u: {"measured": m} for u, m in measured.items()},
    )
    return result.to_dict()


def plan_run(
    run_dir: PathLike,
    slo: str,
    *,
    prices: PathLike | None = None,
    levels: Sequence[int] | None = None,
    setup: str | None = None,
    solver: str = "auto",
    margin: float | None = None,
    demand_margin: float | None = None,
    changes: Sequence[str] = (),
    duration: float = 120.0,
    seed: int = 1,
) -> dict[str, Any]:
    """The cheapest configuration meeting ``slo`` and the profit-optimal one, per level."""
    from tierscope.plan import fit_model, measured_levels, parse_slo, plan, plan_document
    from tierscope.plan.planner import DEFAULT_DEMAND_MARGIN, DEFAULT_MARGIN
    from tierscope.plan.whatif import with_changes
    from tierscope.spec.prices import Prices, load_prices

    margin = DEFAULT_MARGIN if margin is None else margin
    demand_margin = DEFAULT_DEMAND_MARGIN if demand_margin is None else demand_margin
    objectives = parse_slo(slo)
    price_book = load_prices(prices) if prices is not None else Prices()
    run = read_run_dir(run_dir)
    chosen = setup or run.points["setup"][0]
    users = list(levels or [round(v) for v in measured_levels(run, chosen)["level"].to_list()])
    model, _, _ = fit_model(run, setup=setup, solver=solver, seed=seed)
    model = with_changes(model, list(changes))
    plans = plan(
        model,
        users,
        objectives,
        price_book,
        solver=solver,
        duration=duration,
        seed=seed,
        margin=margin,
        demand_margin=demand_margin,
    )
    return plan_document(model, plans, objectives, price_book, margin, demand_margin)


# ---- elastic control ---------------------------------------------------------------------------
def control_run(
    spec_file: PathLike,
    policy: str,
    trace: str,
    *,
    twin: PathLike | None,
    slo: str = "p95<0.5",
    interval: float = 30.0,
    startup: float = 30.0,
    max_replicas: int = 4,
    overrides: Sequence[str] = (),
    seed: int = 1,
) -> dict[str, Any]:
    """A controller (or ``all`` of them) over a workload trace on the twin of the system of
    ``spec_file``, calibrated from the run folder ``twin``: SLA satisfaction, node-hours,
    reconfigurations, time under-provisioned and the intervals."""
    from tierscope.plan import fit_model, parse_slo
    from tierscope.plan.control import (
        IAE,
        POLICIES,
        Bounds,
        ModelPolicy,
        Static,
        Threshold,
        cheapest,
        control_twin,
        model_meets,
    )
    from tierscope.spec.experiment import load_experiment
    from tierscope.spec.trace import read_trace

    if policy not in (*POLICIES, "all"):
        raise InputError("--policy", policy, "one of " + ", ".join((*POLICIES, "all")))
    for name, value, ok in (("--interval", interval, interval > 0),
                            ("--startup", startup, startup >= 0),
                            ("--max-replicas", max_replicas, max_replicas >= 1)):  # fmt: skip
        if not ok:
            raise InputError(name, value, "a number > 0 (>= 0 for --startup, >= 1 replicas)")
    objectives = parse_slo(slo)
    load = read_trace(trace)
    spec, _ = load_experiment(spec_file, list(overrides))
    if twin is None:
        raise InputError("--twin", None, "a run folder of this system to calibrate the twin from "
                         "(control of the live system is not available yet)")  # fmt: skip
    model, _, _ = fit_model(read_run_dir(twin), seed=seed)
    initial = {c: spec.system.replicas.get(c, 0) for c in model.names}
    missing = [c for c, n in initial.items() if n < 1]
    if missing:
        raise InputError("system", missing[0], f"the components of the run {twin}: "
                         + ", ".join(model.names), source=str(spec_file))  # fmt: skip
    most = {c: max(max_replicas, initial[c]) for c in model.names}
    bounds = Bounds({c: 1 for c in model.names}, most)
    meets = model_meets(model, objectives, seed=seed)
    sized: dict[str, dict[str, int] | None] = {}

    def size(at: float) -> dict[str, int]:
        """The cheapest configuration meeting the SLO at ``at`` users (the largest if none)."""
        if at not in sized:
            sized[at] = cheapest(bounds, lambda c: meets(c, at))
        return sized[at] or dict(most)

    def controller(name: str) -> Any:
        if name == "static":
            return Static(initial)
        if name == "static-peak":
            return Static(size(load.peak), name=name)
        if name == "static-mean":
            return Static(size(load.mean()), name=name)
        if name == "threshold":
            return Threshold(bounds)
        if name == "iae":
            return IAE(bounds)
        return ModelPolicy(bounds, meets)

    docs = []
    for name in POLICIES if policy == "all" else (policy,):
        ctl = controller(name)
        start = ctl.config if isinstance(ctl, Static) else initial
        result = control_twin(model, load, ctl, objectives=objectives, initial=dict(start),
                              most=most, interval=interval, startup=startup, seed=seed)  # fmt: skip
        docs.append(result.to_dict())
    common = {
        "trace": {"source": load.source, "duration_s": load.end, "mean": load.mean(),
                  "peak": load.peak},
        "twin": str(twin),
        "interval_s": interval,
        "startup_s": startup,
        "bounds": {"low": bounds.low, "high": bounds.high},
        "sized": {"peak": size(load.peak), "mean": size(load.mean())},
    }  # fmt: skip
    return docs[0] | common if policy != "all" else {"policies": docs} | common


# ---- learning: corpus, learn, classify --------------------------------------------------------
def corpus_run(
    spec_file: PathLike, setups: int = 20, out_dir: PathLike = "corpus", *, twin: bool = False
) -> dict[str, Any]:
    """Run (or simulate with the queueing twin) ``setups`` setups of a corpus spec; a summary."""
    from tierscope.learn.corpus import build_corpus
    from tierscope.spec.learn import load_corpus_spec

    spec = load_corpus_spec(spec_file)
    doc = build_corpus(spec, setups, Path(out_dir), twin=twin, source=str(spec_file))
    return {
        "out": str(out_dir),
        "kind": doc["kind"],
        "setups": len(doc["setups"]),
        "run": sum(s["status"] == "run" for s in doc["setups"]),
        "planted_tiers": {
            t: sum(s["planted_tier"] == t for s in doc["setups"])
            for t in sorted({s["planted_tier"] for s in doc["setups"]})
        },
    }


def learn_data(
    data: Sequence[PathLike], options: dict[str, Any] | None = None, *,
    save: PathLike | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Cross-validate the classifiers on run/corpus folders or a table (``options``: the
    LearnOptions fields); with ``save``, fit the best on all data and save it there."""
    from tierscope.learn import evaluate, load_dataset
    from tierscope.learn.persist import save as save_model
    from tierscope.learn.persist import train
    from tierscope.spec.learn import LearnOptions

    opts = LearnOptions.parse(options or {}, source="tierscope learn")
    dataset = load_dataset([Path(p) for p in data], opts.window_s, jobs=opts.jobs)
    doc = evaluate(dataset, opts)
    if save is not None:
        bundle = train(
            dataset, target=opts.target, model=doc["best"], feature_set=opts.features,
            evaluation=doc,
        )  # fmt: skip
        doc["saved"] = str(save_model(bundle, Path(save)))
    return doc


def classify_run(model_file: PathLike, metrics: PathLike) -> dict[str, Any]:
    """The saturated side and limiting tier of the latest window of ``metrics`` (a CSV of
    recent samples or a run folder), by a model from :func:`learn_data`."""
    from tierscope.learn.classify import classify
    from tierscope.learn.persist import load

    return classify(load(Path(model_file)), Path(metrics))


__all__ = [
    "analyse_run",
    "analysis_options",
    "calibrate_run",
    "classify_run",
    "corpus_run",
    "default_run_dir",
    "estimate_input",
    "import_data",
    "import_run",
    "learn_data",
    "offer_load",
    "plan_run",
    "queue_metrics",
    "read_run_dir",
    "report_run",
    "run_sweep",
    "simulate_model",
    "solve_model",
    "usl_file",
    "whatif_run",
]
