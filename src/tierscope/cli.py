"""The ``tierscope`` command line: wiring only.

Design decision (after ripgrep): arguments become spec objects, spec objects go to the layer that
computes, results are rendered by ``report``; errors leave through one place, :func:`main`, which
maps bad input to exit status 2 with a one-line message naming the file and field, and anything
unexpected to exit status 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from tierscope import __version__, workflows
from tierscope.errors import InputError, TierscopeError

app = typer.Typer(
    name="tierscope",
    help="Find, explain and predict performance bottlenecks in multi-tier systems.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
model_app = typer.Typer(
    help="Queueing-network models: solve, single-queue formulas.", no_args_is_help=True
)
app.add_typer(model_app, name="model")
fit_app = typer.Typer(help="Fit distributions to measured times.", no_args_is_help=True)
app.add_typer(fit_app, name="fit")
kafka_app = typer.Typer(
    help="Kafka: reliability of producer settings, and their control.", no_args_is_help=True
)
app.add_typer(kafka_app, name="kafka")
import_app = typer.Typer(help="Import your own measurements as a run folder.", no_args_is_help=True)
app.add_typer(import_app, name="import")

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
SeedOpt = Annotated[int, typer.Option(min=0, max=2**63 - 1, help="Seed of the random streams.")]
ModelFileArg = Annotated[Path, typer.Argument(metavar="MODEL.yaml", help="Model file (YAML).")]
OverridesOpt = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="PATH=VALUE", help="Override a spec field (repeatable)."),
]
RunDirArg = Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run folder.")]
MeasuredRunArg = Annotated[Path, typer.Argument(metavar="RUN_DIR", help="Measured run folder.")]


@contextmanager
def _progress_bars(as_json: bool) -> Iterator[None]:
    """Progress bars on stderr for the long work inside the block: on a terminal only, never
    with ``--json``."""
    from tierscope.progress import reporting

    if as_json or not err.is_terminal:
        yield
        return
    from tierscope.report.progress import ProgressBars

    with ProgressBars(err) as bars, reporting(bars):
        yield


def _emit(doc: dict[str, Any], as_json: bool, render: Any) -> None:
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    else:
        out.print(render(doc))


@app.command()
def version() -> None:
    """Print the tierscope version."""
    out.print(f"tierscope {__version__}")


@model_app.command("solve")
def model_solve(
    model_file: ModelFileArg,
    method: Annotated[
        str,
        typer.Option(help="auto | exact | amva | linearizer | nc | ctmc | open | bounds"),
    ] = "auto",
    tol: Annotated[float | None, typer.Option(help="Tolerance of iterative methods.")] = None,
    max_iter: Annotated[
        int | None, typer.Option(help="Iteration cap of iterative methods.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Solve a queueing-network model and print throughput, response times, utilisations."""
    from tierscope.report import terminal

    doc, title = workflows.solve_model(model_file, method, tol=tol, max_iter=max_iter)
    render = terminal.bounds if doc["method"] == "bounds" else terminal.solution
    _emit(doc, as_json, lambda d: render(d, title))


@model_app.command("simulate")
def model_simulate(
    model_file: ModelFileArg,
    seed: SeedOpt = 1,
    precision: Annotated[
        float, typer.Option(help="Target relative CI half-width of throughputs and times.")
    ] = 0.03,
    confidence: Annotated[float, typer.Option(help="Confidence level of the intervals.")] = 0.99,
    max_events: Annotated[
        int, typer.Option(help="Cap on simulated events (all replications).")
    ] = 20_000_000,
    max_time: Annotated[float | None, typer.Option(help="Cap on simulated time, seconds.")] = None,
    replications: Annotated[int, typer.Option(help="Independent replications (threads).")] = 1,
    trace: Annotated[
        Path | None,
        typer.Option(
            metavar="RUN_DIR",
            help="Write a run folder (time series, per-request traces, perturbations as "
            "events) to this new or empty folder.",
        ),
    ] = None,
    window: Annotated[
        float | None,
        typer.Option(help="Window of the time series, seconds (default: chosen from a pilot run)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Simulate a model (any station, distribution, perturbation) with confidence intervals."""
    from tierscope.report import terminal

    options: dict[str, Any] = {
        "seed": seed,
        "precision": precision,
        "confidence": confidence,
        "max_events": max_events,
        "max_time": max_time,
        "replications": replications,
        "window": window,
    }
    try:
        with _progress_bars(as_json):
            doc, title = workflows.simulate_model(model_file, trace=trace, **options)
    except KeyboardInterrupt:
        if trace is not None:
            err.print(f"interrupted: what was measured is kept in {trace} (partial)", markup=False)
        raise
    _emit(doc, as_json, lambda d: terminal.solution(d, title))
    if trace is not None and not as_json:
        out.print(f"run folder: {trace}", style="dim", markup=False)


@model_app.command("queue")
def model_queue(
    kind: Annotated[str, typer.Option(help="mm1 | mmm | mmmk | mg1 | mg1ps | mph1")],
    arrival_rate: Annotated[float, typer.Option("--arrival-rate", "-l", help="λ [1/s]")],
    service_time: Annotated[
        float | None, typer.Option("--service-time", "-s", help="Mean S [s] (not mph1)")
    ] = None,
    servers: Annotated[int | None, typer.Option(help="m (mmm, mmmk)")] = None,
    capacity: Annotated[int | None, typer.Option(help="K, jobs in system (mmmk)")] = None,
    scv: Annotated[
        float | None, typer.Option(help="Squared coefficient of variation (mg1)")
    ] = None,
    ph: Annotated[
        Path | None,
        typer.Option(metavar="PH.json", help='Phase-type service {"alpha", "D"} (mph1)'),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Metrics of a single queue (M/M/1, M/M/m, M/M/m/K, M/G/1, M/G/1-PS; M/PH/1 by its
    matrix-geometric solution)."""
    from tierscope.report import terminal

    doc = workflows.queue_metrics(
        kind, arrival_rate, service_time, servers=servers, capacity=capacity, scv=scv, ph=ph
    )
    _emit(doc, as_json, lambda d: terminal.key_values(f"{kind} queue", _flat(d)))


@fit_app.command("ph")
def fit_ph(
    samples: Annotated[
        Path, typer.Argument(metavar="SAMPLES.csv", help="Times, one per row (or --column)")
    ],
    phases: Annotated[int, typer.Option(min=1, max=64, help="Phases in all")],
    column: Annotated[
        str | None, typer.Option(help="The column to fit, by its header name")
    ] = None,
    branches: Annotated[int, typer.Option(min=1, max=8, help="Erlang branches at most")] = 4,
    as_json: JsonFlag = False,
) -> None:
    """Fit a hyper-Erlang phase-type distribution by EM (what `model queue --kind mph1 --ph`
    takes), with a Gamma fit beside it."""
    from tierscope.report import terminal

    doc = workflows.fit_phase_type(samples, phases, column=column, branches=branches)
    shown = _flat(doc) + [
        (f"branch {i + 1}: p, phases, rate", f"{b['p']:.4g}, {b['phases']}, {b['rate']:.6g}")
        for i, b in enumerate(doc["branches"])
    ]
    shown += [(f"gamma {k}", v) for k, v in doc["gamma"].items()]
    _emit(doc, as_json, lambda d: terminal.key_values(f"PH fit of {samples.name}", shown))


@app.command()
def fetch(
    name: Annotated[str, typer.Argument(metavar="NAME", help="kafka | cassandra | jolokia")],
    as_json: JsonFlag = False,
) -> None:
    """Fetch a server's pinned jars from Maven Central into tierscope's cache (once)."""
    from tierscope.experiment.artifacts import ARTIFACTS, fetch

    if not as_json and name in ARTIFACTS:
        err.print(f"fetching {name} {ARTIFACTS[name].version} (Maven) ...", markup=False)
    path = fetch(name)
    doc = {"name": name, "version": ARTIFACTS[name].version, "libs": str(path),
           "jars": len(list(path.glob("*.jar")))}  # fmt: skip
    _emit(doc, as_json, lambda d: f"{d['name']} {d['version']}: {d['jars']} jars in {d['libs']}")


@kafka_app.command("reliability")
def kafka_reliability(
    spec_file: Annotated[Path, typer.Argument(metavar="SPEC.yaml", help="A kafka spec.")],
    messages: Annotated[
        int | None, typer.Option(min=1, help="Messages per configuration (default 10,000).")
    ] = None,
    overrides: OverridesOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Count lost and duplicated messages for every configuration of sweep.grid on real
    brokers, with the grid's loss and delay on the producer's link (the thesis's protocol)."""
    from tierscope.report import terminal

    _sigterm_interrupts()
    with _progress_bars(as_json):
        doc = workflows.kafka_reliability(spec_file, overrides or [], messages=messages)
    _emit(doc, as_json, terminal.reliability)
    _exit_if_partial(doc)


@kafka_app.command("throughput")
def kafka_throughput(
    spec_file: Annotated[Path, typer.Argument(metavar="SPEC.yaml", help="A kafka spec.")],
    messages: Annotated[
        int | None, typer.Option(min=1, help="Messages per configuration (default 200,000).")
    ] = None,
    overrides: OverridesOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Measure the producer at full load for every configuration of sweep.grid (batch sizes,
    partitions) and check Wu's throughput model on each configuration left out."""
    from tierscope.report import terminal

    _sigterm_interrupts()
    with _progress_bars(as_json):
        doc = workflows.kafka_throughput(spec_file, overrides or [], messages=messages)
    _emit(doc, as_json, terminal.producer_speed)
    _exit_if_partial(doc)


@kafka_app.command("adapt")
def kafka_adapt(
    spec_file: Annotated[Path, typer.Argument(metavar="SPEC.yaml", help="A kafka spec.")],
    policy: Annotated[
        list[str] | None,
        typer.Option(help="static | dynamic | reactive; repeat to compare (default: the spec's)"),
    ] = None,
    rows: Annotated[
        Path | None,
        typer.Option(help="Reliability rows (kafka reliability --json) the predictor learns"),
    ] = None,
    method: Annotated[str, typer.Option(help="gbm | mlp: the predictor")] = "gbm",
    seed: SeedOpt = 1,
    overrides: OverridesOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Play the spec's network faults as a staged trace while the live producer is
    reconfigured (Algorithm 1, reactive batching) or not (static); measure each policy."""
    from tierscope.report import terminal

    chosen = [p.strip() for text in policy or [] for p in text.split(",") if p.strip()]
    _sigterm_interrupts()
    with _progress_bars(as_json):
        doc = workflows.kafka_adapt(spec_file, overrides or [], policies=chosen, rows_file=rows,
                                    method=method, seed=seed)  # fmt: skip
    _emit(doc, as_json, terminal.adapt)
    _exit_if_partial(doc)


@kafka_app.command("learn")
def kafka_learn(
    rows: Annotated[
        Path, typer.Argument(metavar="ROWS", help="kafka reliability --json output, or a CSV")
    ],
    method: Annotated[str, typer.Option(help="gbm | mlp (the thesis's network)")] = "gbm",
    folds: Annotated[int, typer.Option(min=2, max=50, help="Folds of configurations")] = 5,
    seed: SeedOpt = 1,
    as_json: JsonFlag = False,
) -> None:
    """Cross-validate the loss and duplication predictor on producer configurations it never
    saw, against the constant baseline."""
    from tierscope.report import terminal

    with _progress_bars(as_json):
        doc = workflows.kafka_learn(rows, method=method, folds=folds, seed=seed)
    _emit(doc, as_json, lambda d: terminal.key_values(f"Reliability predictor ({method})",
                                                      _flat(d)))  # fmt: skip


@app.command()
def usl(
    data: Annotated[
        Path, typer.Argument(metavar="DATA.csv", help="Columns concurrency,throughput")
    ],
    as_json: JsonFlag = False,
) -> None:
    """Fit the Universal Scalability Law X(N) = λN / (1 + σ(N−1) + κN(N−1))."""
    from tierscope.report import terminal

    doc = workflows.usl_file(data)
    _emit(doc, as_json, lambda d: terminal.key_values(f"USL fit of {data.name}", _flat(d)))


@app.command()
def run(
    spec_file: Annotated[Path, typer.Argument(metavar="SPEC.yaml", help="Experiment spec (YAML).")],
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Run folder to create (default: runs/NAME-TIMESTAMP)."),
    ] = None,
    overrides: OverridesOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Deploy a system, sweep the load, monitor every tier at 50 ms, write the run folder."""
    from tierscope.spec.experiment import load_experiment

    spec, doc = load_experiment(spec_file, overrides or [])
    _sweep(spec, doc, out_dir, str(spec_file), as_json)


@app.command()
def demo(
    quick: Annotated[
        bool, typer.Option("--quick", help="Four short levels (about a minute).")
    ] = False,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Run folder (default: runs/demo-TIMESTAMP).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run the embedded three-tier system across its saturation point and name the bottleneck."""
    from tierscope.experiment import DEMO_SPEC, QUICK_OVERRIDES
    from tierscope.spec.experiment import load_experiment

    spec, doc = load_experiment(DEMO_SPEC, QUICK_OVERRIDES if quick else ())
    _sweep(spec, doc, out_dir, "tierscope demo" + (" --quick" if quick else ""), as_json)


def _sigterm_interrupts() -> None:
    """SIGTERM stops the command as Ctrl-C does (what was measured is kept)."""
    import signal

    def on_sigterm(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)


def _exit_if_partial(doc: dict[str, Any]) -> None:
    """After a measured document was shown: status 1 if a failure stopped it, 130 if it was
    interrupted."""
    if not doc.get("partial"):
        return
    if doc.get("failure"):
        err.print(f"error: {doc['failure']} (what was measured before it is shown)", markup=False)
        raise typer.Exit(1)
    err.print("interrupted: partial results", markup=False)
    raise typer.Exit(130)


def _sweep(spec: Any, doc: dict[str, Any], out_dir: Path | None, source: str, as_json: bool):
    """``workflows.run_sweep`` with a live view, then where it saturated and what limited it."""

    from rich.console import Group

    from tierscope.report import terminal
    from tierscope.report.progress import ProgressView

    out_dir = out_dir or workflows.default_run_dir(spec.name)

    _sigterm_interrupts()
    console = err if as_json else out
    view = ProgressView(
        console,
        title=f"tierscope run {spec.name} → {out_dir}",
        levels=len(spec.sweep.level_values),
        setups=max(1, len(spec.sweep.setups)),
        reps=spec.sweep.repetitions,
    )
    try:
        with view:
            summary = workflows.run_sweep(spec, doc, out_dir, source=source, progress=view)
        console.print()
    except KeyboardInterrupt:
        err.print(f"interrupted: what was measured is kept in {out_dir} (partial)", markup=False)
        raise
    _emit(
        summary,
        as_json,
        lambda d: Group(
            terminal.run_summary(d),
            terminal.analysis_summary(d["analysis"], f"analysis of {out_dir}"),
            Text(f"report: {out_dir / 'report.html'}", style="dim"),
        ),
    )


OptionPairs = Annotated[
    list[str] | None,
    typer.Option(
        "--option",
        "-o",
        metavar="KEY=VALUE",
        help="Any analysis option (repeatable), e.g. -o permutations=199.",
    ),
]


@app.command()
def analyze(
    run_dir: RunDirArg,
    margin: Annotated[
        float | None, typer.Option(help="Margin M when the run has no +1 node setup.")
    ] = None,
    window: Annotated[
        float | None, typer.Option(help="Window [s] in which resource saturation is judged.")
    ] = None,
    threshold: Annotated[
        float | None, typer.Option(help="Utilisation from which a resource is saturated.")
    ] = None,
    slo: Annotated[float | None, typer.Option(help="Response-time objective [s].")] = None,
    vlrt: Annotated[float | None, typer.Option(help="Very long response time [s].")] = None,
    mb_window: Annotated[
        float | None, typer.Option(help="Window [s] of the millibottleneck analysis.")
    ] = None,
    option: OptionPairs = None,
    write: Annotated[
        bool, typer.Option("--write/--no-write", help="Write analysis.json into RUN_DIR.")
    ] = True,
    as_json: JsonFlag = False,
) -> None:
    """Saturation point, bottleneck tier and resource, indicators, millibottlenecks of a run."""
    from tierscope.report import terminal

    options = workflows.analysis_options(
        option,
        margin=margin,
        window_s=window,
        saturation_threshold=threshold,
        slo_s=slo,
        vlrt_s=vlrt,
        mb_window_s=mb_window,
    )
    doc = workflows.analyse_run(run_dir, options, write=write)
    _emit(doc, as_json, lambda d: terminal.analysis_summary(d, f"analysis of {run_dir}"))


@app.command()
def report(
    run_dir: RunDirArg,
    out_file: Annotated[
        Path | None,
        typer.Option("--out", metavar="FILE", help="HTML file (default RUN_DIR/report.html)."),
    ] = None,
    option: OptionPairs = None,
    model: Annotated[
        Path | None,
        typer.Option("--model", metavar="MODEL", help="Add the 'learned indicators' of a model."),
    ] = None,
) -> None:
    """Write the self-contained HTML report of a run (and its analysis.json)."""
    path = workflows.report_run(run_dir, option, out_file=out_file, model=model)
    out.print(f"report: {path}", markup=False)


#: Options every importer shares.
CpuUnitOpt = Annotated[
    str | None, typer.Option(help="CPU series: percent | cores | fraction (else detected).")
]
CpuLimitOpt = Annotated[
    list[str] | None,
    typer.Option(metavar="COMPONENT=CORES", help="A component's CPU limit (repeatable)."),
]
MemLimitOpt = Annotated[
    list[str] | None,
    typer.Option(
        metavar="COMPONENT=BYTES", help="A component's memory limit (512Mi, 2G; repeatable)."
    ),
]
GraphOpt = Annotated[
    Path | None,
    typer.Option(metavar="FILE", help="Call graph: adjacency CSV, or YAML component: [callees]"),
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Replace a run folder's own files (nothing else).")
]


@import_app.command("csv")
def import_csv_command(
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="RUN_DIR", help="New or empty run folder.")
    ],
    metrics: Annotated[
        Path | None, typer.Option(metavar="FILE.csv", help="ts,tier,metric,value[,node,...]")
    ] = None,
    requests: Annotated[
        Path | None, typer.Option(metavar="FILE.csv", help="tier,request_id,start,end[,...]")
    ] = None,
    points: Annotated[
        Path | None, typer.Option(metavar="FILE.csv", help="level,throughput[,setup,rep,...]")
    ] = None,
    force: ForceOpt = False,
    as_json: JsonFlag = False,
) -> None:
    """Write your own CSV measurements as a run folder that analyze and report read."""
    from tierscope.report import terminal

    with _progress_bars(as_json):
        doc = workflows.import_run(
            out_dir, metrics=metrics, requests=requests, points=points, force=force
        )
    _emit(
        doc,
        as_json,
        lambda d: terminal.key_values(
            f"imported into {d['run_dir']}",
            _flat(d) + [(f"rows of {k}", v) for k, v in d["rows"].items()],
        ),
    )


@import_app.command("metrics")
def import_metrics_command(
    files: Annotated[
        list[Path], typer.Argument(metavar="FILE...", help="Metric tables (CSV), long or wide.")
    ],
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="RUN_DIR", help="New or empty run folder.")
    ],
    baseline: Annotated[
        list[Path] | None,
        typer.Option(metavar="FILE", help="The same metrics in normal operation (repeatable)."),
    ] = None,
    mapping: Annotated[
        Path | None,
        typer.Option("--map", metavar="FILE.yaml", help="column: component.metric, explicitly."),
    ] = None,
    time_column: Annotated[str | None, typer.Option(help="The time column's name.")] = None,
    time_unit: Annotated[
        str | None, typer.Option(help="Unit of numeric times: s | ms | us | ns (else detected).")
    ] = None,
    tz: Annotated[
        str | None, typer.Option(help="Zone of date-times written without one (default UTC).")
    ] = None,
    cpu_unit: CpuUnitOpt = None,
    cpu_limit: CpuLimitOpt = None,
    mem_limit: MemLimitOpt = None,
    graph: GraphOpt = None,
    force: ForceOpt = False,
    as_json: JsonFlag = False,
) -> None:
    """Import metric tables as exported by Prometheus, Grafana, cAdvisor or a spreadsheet."""
    from tierscope.report import terminal

    with _progress_bars(as_json):
        doc = workflows.import_data(
            "metrics", out_dir, files, baseline=baseline or (), mapping=mapping,
            time_column=time_column, time_unit=time_unit, tz=tz, cpu_unit=cpu_unit,
            cpu_limit=cpu_limit or (), mem_limit=mem_limit or (), graph=graph, force=force,
        )  # fmt: skip
    _emit(doc, as_json, terminal.imported)


@import_app.command("prometheus")
def import_prometheus_command(
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="RUN_DIR", help="New or empty run folder.")
    ],
    files: Annotated[
        list[Path] | None,
        typer.Argument(metavar="[FILE...]", help="query_range answers (JSON), one per query."),
    ] = None,
    url: Annotated[
        str | None, typer.Option(help="Ask this Prometheus server instead (with --query-file).")
    ] = None,
    query_file: Annotated[
        Path | None, typer.Option(metavar="Q.yaml", help="metric: PromQL, one per line.")
    ] = None,
    start: Annotated[str | None, typer.Option(help="From (epoch seconds or ISO 8601).")] = None,
    end: Annotated[str | None, typer.Option(help="Until (epoch seconds or ISO 8601).")] = None,
    step: Annotated[float, typer.Option(help="Seconds between samples.")] = 15.0,
    component_label: Annotated[
        list[str] | None,
        typer.Option(
            help="Label naming the component (repeatable; default job, container, pod, service)."
        ),
    ] = None,
    metric: Annotated[
        str | None, typer.Option(help="The metric of every file (default: the file's name).")
    ] = None,
    baseline: Annotated[
        list[Path] | None,
        typer.Option(metavar="FILE", help="The same queries in normal operation (repeatable)."),
    ] = None,
    cpu_unit: CpuUnitOpt = None,
    cpu_limit: CpuLimitOpt = None,
    mem_limit: MemLimitOpt = None,
    graph: GraphOpt = None,
    force: ForceOpt = False,
    as_json: JsonFlag = False,
) -> None:
    """Import Prometheus query_range answers: JSON files, or asked of a server (--url)."""
    from tierscope.report import terminal

    with _progress_bars(as_json):
        doc = workflows.import_data(
            "prometheus", out_dir, files or (), url=url, query_file=query_file, start=start,
            end=end, step=step, component_label=component_label or (), metric=metric,
            baseline=baseline or (), cpu_unit=cpu_unit, cpu_limit=cpu_limit or (),
            mem_limit=mem_limit or (), graph=graph, force=force,
        )  # fmt: skip
    _emit(doc, as_json, terminal.imported)


#: The importers of load tools' and tracers' files: format -> what FILE is.
_FILE_FORMATS = {
    "jmeter": "JMeter results (JTL CSV with its header row).",
    "locust": "Locust's stats histories (PREFIX_stats_history.csv of --csv PREFIX).",
    "k6": "k6 results: --out json NDJSON, or a summary (--summary-export).",
    "otlp": "OpenTelemetry traces: OTLP JSON (file exporter) or protobuf.",
}


def _file_importer(fmt: str, what: str) -> None:
    """Register ``tierscope import <fmt>``."""

    def command(
        files: Annotated[list[Path], typer.Argument(metavar="FILE...", help="Files to import.")],
        out_dir: Annotated[
            Path, typer.Option("--out", metavar="RUN_DIR", help="New or empty run folder.")
        ],
        baseline: Annotated[
            list[Path] | None,
            typer.Option(metavar="FILE", help="A recording of normal operation (repeatable)."),
        ] = None,
        graph: GraphOpt = None,
        force: ForceOpt = False,
        as_json: JsonFlag = False,
    ) -> None:
        from tierscope.report import terminal

        with _progress_bars(as_json):
            doc = workflows.import_data(
                fmt, out_dir, files, baseline=baseline or (), graph=graph, force=force
            )
        _emit(doc, as_json, terminal.imported)

    command.__doc__ = f"Import {what}"
    import_app.command(fmt)(command)


for _fmt, _what in _FILE_FORMATS.items():
    _file_importer(_fmt, _what)


@import_app.command("collectl")
def import_collectl_command(
    files: Annotated[
        list[Path],
        typer.Argument(metavar="FILE...", help="Plot files (collectl -P): .tab, .cpu, .prc."),
    ],
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="RUN_DIR", help="New or empty run folder.")
    ],
    baseline: Annotated[
        list[Path] | None,
        typer.Option(metavar="FILE", help="A recording of normal operation (repeatable)."),
    ] = None,
    cpu_limit: CpuLimitOpt = None,
    mem_limit: MemLimitOpt = None,
    graph: GraphOpt = None,
    force: ForceOpt = False,
    as_json: JsonFlag = False,
) -> None:
    """Import collectl plot files (collectl -P -f DIR; gzipped or not)."""
    from tierscope.report import terminal

    with _progress_bars(as_json):
        doc = workflows.import_data(
            "collectl", out_dir, files, baseline=baseline or (), cpu_limit=cpu_limit or (),
            mem_limit=mem_limit or (), graph=graph, force=force,
        )  # fmt: skip
    _emit(doc, as_json, terminal.imported)


@import_app.command("access-log")
def import_access_log_command(
    files: Annotated[list[Path], typer.Argument(metavar="FILE...", help="Access logs.")],
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="RUN_DIR", help="New or empty run folder.")
    ],
    log_format: Annotated[
        str,
        typer.Option(
            metavar="FORMAT",
            help="The server's log format: nginx log_format ($msec ... $request_time) or "
            "Apache LogFormat (%t ... %D).",
        ),
    ],
    component: Annotated[
        str | None, typer.Option(help="The server's name (default nginx or apache).")
    ] = None,
    upstream: Annotated[
        str, typer.Option(help="The component $upstream_response_time measures.")
    ] = "upstream",
    tz: Annotated[
        str | None, typer.Option(help="Zone of date-times written without one (default UTC).")
    ] = None,
    baseline: Annotated[
        list[Path] | None,
        typer.Option(metavar="FILE", help="A log of normal operation (repeatable)."),
    ] = None,
    graph: GraphOpt = None,
    force: ForceOpt = False,
    as_json: JsonFlag = False,
) -> None:
    """Import web servers' access logs (nginx, Apache), read with their log format."""
    from tierscope.report import terminal

    with _progress_bars(as_json):
        doc = workflows.import_data(
            "access-log", out_dir, files, log_format=log_format, component=component,
            upstream=upstream, tz=tz, baseline=baseline or (), graph=graph, force=force,
        )  # fmt: skip
    _emit(doc, as_json, terminal.imported)


@app.command()
def load(
    target: Annotated[
        str, typer.Argument(metavar="URL|WORKLOAD.yaml", help="A URL or a workload file.")
    ],
    users: Annotated[int | None, typer.Option(help="Closed loop: emulated users.")] = None,
    think: Annotated[
        float | None, typer.Option(help="Mean think time, seconds (exponential by default).")
    ] = None,
    think_dist: Annotated[
        str | None, typer.Option(help="Think-time law: exp | uniform | constant | none.")
    ] = None,
    rate: Annotated[float | None, typer.Option(help="Open loop: requests per second.")] = None,
    session_rate: Annotated[
        float | None, typer.Option(help="Partly open: sessions per second.")
    ] = None,
    session_length: Annotated[
        float | None, typer.Option(help="Partly open from a URL: mean requests per session.")
    ] = None,
    mode: Annotated[
        str | None, typer.Option(help="closed | open | partly-open (default: from the workload).")
    ] = None,
    mix: Annotated[str | None, typer.Option(help="Mix of the workload file to use.")] = None,
    arrival: Annotated[
        str | None, typer.Option(help="Arrivals (open, partly open): poisson | constant.")
    ] = None,
    duration: Annotated[float, typer.Option(help="Steady window, seconds.")] = 10.0,
    warmup: Annotated[float, typer.Option(help="Ramp-up before the steady window, s.")] = 0.0,
    ramp_down: Annotated[float, typer.Option(help="Ramp-down after it, seconds.")] = 0.0,
    connections: Annotated[
        int | None,
        typer.Option(help="Connections shared by all users (default: one per user)."),
    ] = None,
    threads: Annotated[int, typer.Option(help="Generator threads.")] = 1,
    timeout: Annotated[float, typer.Option(help="Request timeout, seconds.")] = 10.0,
    max_outstanding: Annotated[
        int | None, typer.Option(help="Open loop: bound on requests in flight.")
    ] = None,
    base_url: Annotated[
        list[str] | None,
        typer.Option(help="Server for relative workload URLs (repeat for several)."),
    ] = None,
    seed: SeedOpt = 1,
    priority: Annotated[
        str, typer.Option(help="Generator threads' CPU priority: realtime | high | normal.")
    ] = "realtime",
    out: Annotated[
        Path | None,
        typer.Option(metavar="RUN_DIR", help="Write a run folder (requests, client metrics)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Offer HTTP load (closed, open, partly open); latency free of coordinated omission.

    Flags runs where the load generator itself was the bottleneck.
    """
    from tierscope.report import terminal

    options = {"users": users, "think": think, "think_dist": think_dist, "rate": rate,
               "session_rate": session_rate, "session_length": session_length, "mode": mode,
               "mix": mix, "arrival": arrival}  # fmt: skip
    progress = None if as_json else terminal.LoadProgress(err, warmup + duration + ramp_down)
    try:
        doc, name = workflows.offer_load(
            target, workload=options, base_urls=base_url or (), warmup=warmup,
            duration=duration, ramp_down=ramp_down, seed=seed, connections=connections,
            threads=threads, timeout=timeout, max_outstanding=max_outstanding,
            priority=priority, out=out, on_progress=None if progress is None else progress.show,
        )  # fmt: skip
    except KeyboardInterrupt:
        if out is None:
            raise
        err.print(f"interrupted: what was measured is kept in {out} (partial)", markup=False)
        raise typer.Exit(130) from None
    finally:
        if progress is not None:
            progress.close()
    if out is None and doc["partial"] and "failure" not in doc:
        err.print("interrupted: partial results", markup=False)
    _emit(doc, as_json, lambda d: terminal.load_summary(d, name))
    if out is not None and not as_json:
        err.print(f"run folder: {out}", style="dim", markup=False)
    if "failure" in doc:
        err.print(f"error: {doc['failure']}", markup=False)
        raise typer.Exit(1)
    if doc["partial"]:
        raise typer.Exit(130)


# ---- models from measurements: estimate, calibrate, whatif, plan ---------------------------------
def _levels(text: str | None) -> list[int] | None:
    """``10,30,50`` or ``10:100:10`` (start:stop:step, stop included) -> users."""
    if text is None:
        return None
    try:
        if ":" in text:
            a, b, c = (int(v) for v in text.split(":"))
            values = list(range(a, b + 1, c))
        else:
            values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError("--levels", text, "users as 10,30,50 or start:stop:step") from None
    if not values or any(v < 1 for v in values):
        raise InputError("--levels", text, "at least one number of users >= 1")
    return values


SetupOpt = Annotated[
    str | None, typer.Option(help="Setup of a multi-setup run (default: the first).")
]
SolverOpt = Annotated[
    str, typer.Option(help="auto | quota-sim | mva: how the calibrated model is solved.")
]


@app.command()
def estimate(
    input_path: Annotated[
        Path, typer.Argument(metavar="INPUT", help="Run folder, or CSV of observation windows.")
    ],
    method: Annotated[str, typer.Option(help="auto | ubr | ubo | ci | mle | sd")] = "auto",
    classes: Annotated[
        str, typer.Option(help="Run folders: 'all' requests as one class, or by 'interaction'.")
    ] = "all",
    window: Annotated[float, typer.Option(help="Run folders: observation window, s.")] = 1.0,
    setup: SetupOpt = None,
    bootstrap: Annotated[
        int | None, typer.Option(help="Bootstrap resamples for the intervals (0: none).")
    ] = None,
    confidence: Annotated[float, typer.Option(help="Level of the intervals.")] = 0.95,
    k_states: Annotated[int, typer.Option(help="SD: states kept per station.")] = 15,
    states: Annotated[str, typer.Option(help="SD: largest | bands.")] = "largest",
    search: Annotated[str, typer.Option(help="SD: local | multistart | global.")] = "multistart",
    divergence: Annotated[
        str, typer.Option(help="SD: hellinger | bhattacharyya | kl | js.")
    ] = "hellinger",
    delta: Annotated[
        float | None, typer.Option(help="SD: throughput tolerance |X~-X| <= delta X~.")
    ] = None,
    seed: SeedOpt = 1,
    as_json: JsonFlag = False,
) -> None:
    """Estimate service demands (seconds per request at each station) with intervals."""
    from tierscope.plan import _terminal

    doc = workflows.estimate_input(
        input_path,
        method,
        classes=classes,
        window=window,
        setup=setup,
        n_boot=bootstrap,
        confidence=confidence,
        seed=seed,
        k_states=k_states,
        states=states,
        search=search,
        divergence=divergence,
        delta=delta,
    )
    _emit(doc, as_json, lambda d: _terminal.estimate(d, input_path.name))


@app.command()
def calibrate(
    run_dir: MeasuredRunArg,
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out", metavar="MODEL.yaml", help="Model file (default RUN_DIR/model.yaml)."
        ),
    ] = None,
    setup: SetupOpt = None,
    solver: SolverOpt = "auto",
    window: Annotated[float, typer.Option(help="Observation window for the estimators, s.")] = 1.0,
    duration: Annotated[float, typer.Option(help="Simulated seconds per level.")] = 300.0,
    seed: SeedOpt = 1,
    as_json: JsonFlag = False,
) -> None:
    """Build the run's queueing model, write it, and compare it with every measured level."""
    from tierscope.plan import _terminal

    with _progress_bars(as_json):
        doc = workflows.calibrate_run(
            run_dir, out_file, setup=setup, solver=solver, window=window, duration=duration,
            seed=seed,
        )  # fmt: skip
    _emit(doc, as_json, lambda d: _terminal.calibration(d, run_dir.name))


@app.command()
def whatif(
    run_dir: MeasuredRunArg,
    changes: Annotated[
        list[str] | None,
        typer.Option(
            "--set", metavar="TIER.FIELD=VALUE", help="db.servers=2, app.cpu=1.0, ... (repeatable)."
        ),
    ] = None,
    levels: Annotated[
        str | None, typer.Option(help="Users: 10,30,50 or start:stop:step (default: the sweep's).")
    ] = None,
    setup: SetupOpt = None,
    solver: SolverOpt = "auto",
    duration: Annotated[float, typer.Option(help="Simulated seconds per level.")] = 300.0,
    seed: SeedOpt = 1,
    as_json: JsonFlag = False,
) -> None:
    """Predict the measured system with changed replicas, quotas or demands."""
    from tierscope.plan import _terminal

    with _progress_bars(as_json):
        doc = workflows.whatif_run(
            run_dir, changes or [], _levels(levels), setup=setup, solver=solver,
            duration=duration, seed=seed,
        )  # fmt: skip
    _emit(doc, as_json, lambda d: _terminal.whatif(d, run_dir.name))


@app.command()
def plan(
    run_dir: MeasuredRunArg,
    slo: Annotated[str, typer.Option(help='Objective(s), e.g. "p95<0.5" or "mean<200ms,p99<1".')],
    prices: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Prices, SLA bands and search space (YAML).")
    ] = None,
    levels: Annotated[
        str | None, typer.Option(help="Users: 10,30,50 or start:stop:step (default: the sweep's).")
    ] = None,
    setup: SetupOpt = None,
    solver: SolverOpt = "auto",
    margin: Annotated[
        float, typer.Option(help="Headroom: the predicted statistic must be this fraction below.")
    ] = 0.2,  # plan.planner.DEFAULT_MARGIN (the CLI imports its commands' modules lazily)
    demand_margin: Annotated[
        float, typer.Option(help="Predict with every demand this fraction above the measured.")
    ] = 0.1,  # plan.planner.DEFAULT_DEMAND_MARGIN
    changes: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="TIER.FIELD=VALUE",
            help="Change the model first, e.g. host.background=0 (plan for a quiet host).",
        ),
    ] = None,
    duration: Annotated[float, typer.Option(help="Simulated seconds per evaluation.")] = 120.0,
    seed: SeedOpt = 1,
    as_json: JsonFlag = False,
) -> None:
    """Cheapest configuration meeting the SLO, and the profit-optimal one, per workload level."""
    from tierscope.plan import _terminal

    with _progress_bars(as_json):
        doc = workflows.plan_run(
            run_dir, slo, prices=prices, levels=_levels(levels), setup=setup, solver=solver,
            margin=margin, demand_margin=demand_margin, changes=changes or [],
            duration=duration, seed=seed,
        )  # fmt: skip
    _emit(doc, as_json, lambda d: _terminal.plan(d, run_dir.name))


@app.command()
def control(
    spec_file: Annotated[Path, typer.Argument(metavar="SPEC.yaml", help="Experiment spec (YAML).")],
    policy: Annotated[
        str,
        typer.Option(help="static|static-peak|static-mean|threshold|iae|model, or all of them."),
    ],
    trace: Annotated[
        str,
        typer.Option(
            metavar="TRACE",
            help="time,load CSV file, or diurnal|step|spike|flash[:key=value,...].",
        ),
    ],
    twin: Annotated[
        Path | None,
        typer.Option(metavar="RUN_DIR", help="Run folder of the system to calibrate the twin."),
    ] = None,
    slo: Annotated[str, typer.Option(help='Objective(s), e.g. "p95<0.5".')] = "p95<0.5",
    interval: Annotated[float, typer.Option(help="Control interval, seconds.")] = 30.0,
    startup: Annotated[float, typer.Option(help="Seconds before an added replica serves.")] = 30.0,
    max_replicas: Annotated[int, typer.Option(help="Most replicas of each component.")] = 4,
    overrides: OverridesOpt = None,
    seed: SeedOpt = 1,
    as_json: JsonFlag = False,
) -> None:
    """A controller against a workload trace on the twin: SLA satisfaction and node-hours."""
    from tierscope.plan import _terminal

    with _progress_bars(as_json):
        doc = workflows.control_run(
            spec_file, policy, trace, twin=twin, slo=slo, interval=interval, startup=startup,
            max_replicas=max_replicas, overrides=overrides or [], seed=seed,
        )  # fmt: skip
    _emit(doc, as_json, lambda d: _terminal.control(d, spec_file.name))


@app.command()
def corpus(
    spec_file: Annotated[Path, typer.Argument(metavar="SPEC.yaml", help="Corpus spec (YAML).")],
    setups: Annotated[int, typer.Option("--setups", min=1, help="Number of setups.")] = 20,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Corpus folder (one run per setup).")
    ] = Path("corpus"),
    twin: Annotated[
        bool, typer.Option("--twin", help="Simulate each setup with the queueing twin.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Run many setups of a system (different tiers limiting) as sweeps: data for learning."""
    from tierscope.report import terminal

    with _progress_bars(as_json):  # build_corpus reports "running setups" / "simulating setups"
        summary = workflows.corpus_run(spec_file, setups, out_dir, twin=twin)
    _emit(summary, as_json, lambda d: terminal.key_values(f"corpus {out_dir}", _flat(d)))


@app.command()
def learn(
    data: Annotated[
        list[Path], typer.Argument(metavar="DATA...", help="Run/corpus folders or one table.")
    ],
    target: Annotated[str, typer.Option(help="saturation (client/gray/server) or tier.")] = (
        "saturation"
    ),
    features: Annotated[
        str, typer.Option(help="all, recommended, server, resource, latency or waiting.")
    ] = "all",
    scheme: Annotated[str, typer.Option(help="new-setup, new-level or both.")] = "new-setup",
    window: Annotated[float, typer.Option(help="Observation window in seconds.")] = 1.0,
    models: Annotated[
        str | None, typer.Option(help="Comma-separated models (default: all five).")
    ] = None,
    max_folds: Annotated[
        int | None, typer.Option(help="At most this many folds, evenly spread (default: all).")
    ] = None,
    compare: Annotated[
        bool, typer.Option("--compare/--no-compare", help="Score every feature set too.")
    ] = True,
    jobs: Annotated[
        int, typer.Option(help="Worker processes fitting folds (-1: one per core).")
    ] = -1,
    save: Annotated[
        Path | None, typer.Option("--save", metavar="MODEL", help="Fit on all data and save.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Cross-validate classifiers that tell from metrics whether the server side is saturated
    (or which tier limits), on setups or load levels they never saw."""
    from tierscope.report.learning import learn_summary

    given: dict[str, Any] = {
        "target": target,
        "features": features,
        "scheme": scheme,
        "window_s": window,
        "max_folds": max_folds,
        "compare_features": compare,
        "jobs": jobs,
    }
    if models is not None:
        given["models"] = tuple(m.strip() for m in models.split(",") if m.strip())
    with _progress_bars(as_json):  # reading runs, cross-validating, comparing, importance
        doc = workflows.learn_data(data, given, save=save)
    _emit(doc, as_json, learn_summary)


@app.command()
def classify(
    model_file: Annotated[Path, typer.Argument(metavar="MODEL", help="From learn --save.")],
    metrics: Annotated[
        Path, typer.Argument(metavar="METRICS", help="A CSV of recent samples or a run folder.")
    ],
    as_json: JsonFlag = False,
) -> None:
    """Classify the latest window of metrics: saturated side and limiting tier."""
    from tierscope.report.learning import classify_summary

    doc = workflows.classify_run(model_file, metrics)
    _emit(doc, as_json, classify_summary)


def _flat(doc: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(k, v) for k, v in doc.items() if not isinstance(v, dict | list)]


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; the one place where errors become exit codes."""
    try:
        rv = app(args=argv, standalone_mode=False)
    except typer.Abort:
        err.print("interrupted")
        return 130
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.TyperException as exc:  # usage errors: unknown option, missing argument
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            err.print(f"error: {exc.format_message()}", markup=False)
        return int(exc.exit_code)
    except InputError as exc:
        err.print(f"error: {exc}", markup=False, soft_wrap=True)
        return 2
    except TierscopeError as exc:
        err.print(f"error: {exc}", markup=False, soft_wrap=True)
        return 1
    except BrokenPipeError:
        return 0
    return int(rv or 0)


if __name__ == "__main__":
    sys.exit(main())
