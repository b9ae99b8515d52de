"""Observations from a run folder: a measured sweep (``tierscope run``) or a traced simulation
(``tierscope model simulate --trace``).

Measured runs: the stations are the tiers' CPUs and the servers their cores (the sum of the
replicas' quotas, or of their processes without a quota), so demands are CPU seconds per
request. Each point's steady window is cut into windows of ``window`` seconds; in each, the
class throughput is the client requests that ended in it, the busy cores the tier's mean
``cpu_cores`` (summed over replicas), the response time the client requests' mean. The
per-request records become exclusive segments — a request is *at* the app tier only while it
is not at the database — and the 50 ms CPU samples of every node are attached, so complete
information shares measured CPU. Queue-length samples (for SD) are the exclusive number of
requests at each tier every ``sample`` seconds of the steady windows, with the level as the
population of a closed workload.

Simulation runs: the stations and classes of the model; per-window utilisations, throughputs and
response times from the engine windows; per-visit records for complete information (service
from arrival at processor-sharing stations, from the start of service at FCFS ones).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tierscope.domains.ntier import tier_facts
from tierscope.errors import InputError
from tierscope.estimate._data import Observations, RequestRecords
from tierscope.spec.experiment import ExperimentSpec
from tierscope.spec.model import Model
from tierscope.store import Run

#: A CPU sample covers at most this many of its node's usual steps back (see cpu_intervals).
LATE_STEPS = 4
#: Name of the single class when requests are not split by interaction.
ALL = "request"
CLIENT = "client"


def observations_from_run(
    run: Run,
    *,
    window: float = 1.0,
    by: str = "all",
    setup: str | None = None,
    sample: float = 0.05,
) -> Observations:
    """Observations of one setup of a run folder (``by``: ``all`` requests as one class, or
    one class per ``interaction``)."""
    if not window > 0:
        raise InputError("--window", window, "a window length > 0 (s)")
    if by not in ("all", "interaction"):
        raise InputError("--classes", by, "all or interaction")
    if run.points is None or run.points.height == 0:
        raise InputError("points.parquet", str(run.path), "a run with measured points")
    if run.kind == "simulation":
        return _from_simulation(run, window=window, by=by, sample=sample)
    return _from_experiment(run, window=window, by=by, setup=setup, sample=sample)


# ---- measured runs -------------------------------------------------------------------------------
def _from_experiment(
    run: Run, *, window: float, by: str, setup: str | None, sample: float
) -> Observations:
    source = str(run.path)
    spec, points, requests, metrics = setup_tables(run, setup)
    client = requests.filter(pl.col("tier") == CLIENT)
    client = client.with_columns(
        (pl.lit(ALL) if by == "all" else pl.col("interaction")).alias("cls")
    )
    classes = tuple(sorted(client["cls"].unique().to_list())) if by == "interaction" else (ALL,)
    if "coordinator" in client.columns and client["coordinator"].is_not_null().any():
        from tierscope.estimate._cluster import cluster_observations

        return cluster_observations(run, spec, points, client, metrics, classes, window=window)
    tiers = tuple(
        t
        for t in run.graph.names
        if metrics.filter((pl.col("tier") == t) & (pl.col("metric") == "cpu_cores")).height
    )
    if not tiers:
        raise InputError("metrics.parquet", source, "cpu_cores samples of the tiers")
    facts = tier_facts(spec, tiers)
    servers = np.array([facts[t].capacity for t in tiers])
    cpu = metrics.filter(pl.col("metric") == "cpu_cores")

    a, b, level, rep = point_windows(points, window)
    X, R = class_rates(client, classes, a, b, level, rep)
    busy = np.zeros((a.size, len(tiers)))
    for k, t in enumerate(tiers):
        busy[:, k] = window_busy(cpu.filter(pl.col("tier") == t), a, b)
    closed = spec.workload_mode == "closed"
    population = level[:, None].repeat(len(classes), axis=1) if closed and by == "all" else None
    segments = exclusive_segments(requests, tiers)
    records = RequestRecords(
        requests=_steady(client, points).select(
            pl.col("request_id").alias("request"), pl.col("cls")
        ),
        segments=segments,
        servers={
            (t, n): float(facts[t].processes)
            for t in tiers
            for n in segments.filter(pl.col("station") == t)["node"].unique().to_list()
        },
        cpu=cpu_intervals(cpu, tiers),
    )
    queue, qpop = None, None
    if population is not None:
        queue, qpop = _queue_samples(segments, points, tiers, sample)
    return measured(
        classes, tiers, X, R, servers, busy, b - a, population, (queue, qpop), records, source,
        points,
    )  # fmt: skip


def measured(
    classes: tuple[str, ...],
    stations: tuple[str, ...],
    throughput: np.ndarray,
    response_time: np.ndarray,
    servers: np.ndarray,
    busy: np.ndarray,
    window: np.ndarray,
    population: np.ndarray | None,
    queue: tuple[np.ndarray | None, np.ndarray | None],
    records: RequestRecords,
    source: str,
    points: pl.DataFrame,
) -> Observations:
    """The observations of a measured run: CPU seconds per request at ``stations`` with
    ``servers`` cores each, busy ``busy`` cores in each steady window (of ``window`` s), the
    queue samples and their populations (``queue``), the request records."""
    return Observations(
        classes=classes,
        stations=stations,
        throughput=throughput,
        servers=servers,
        utilization=busy / servers[None, :],
        response_time=response_time,
        window=window,
        population=population,
        think_time=None,
        queue=queue[0],
        queue_population=queue[1],
        records=records,
        source=source,
        unit="cpu_s",
        notes=failed_note(points),
    )


def setup_tables(
    run: Run, setup: str | None
) -> tuple[ExperimentSpec, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The spec, points (by level and repetition), requests and metrics of one setup of a
    measured run (default: its first)."""
    points = run.points
    assert points is not None
    setups = points["setup"].unique(maintain_order=True).to_list()
    setup = setup or setups[0]
    spec = run.setup(setup)
    points = points.filter(pl.col("setup") == setup).sort("level", "rep")
    if points.height == 0:
        raise InputError("--setup", setup, "a setup with points: " + ", ".join(setups))
    if run.requests is None or run.metrics is None:
        raise InputError(
            "run", str(run.path), "a run folder with requests.parquet and metrics.parquet"
        )
    requests = run.requests.filter(pl.col("setup") == setup)
    return spec, points, requests, run.metrics.filter(pl.col("setup") == setup)


def failed_note(points: pl.DataFrame) -> tuple[str, ...]:
    """A note on the requests of the points that failed (they are not counted)."""
    errors = float(points["errors"].sum())
    if errors > 0:
        return (f"{errors:g} requests failed in the steady windows; they are not counted",)
    return ()


def point_windows(
    points: pl.DataFrame, window: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each point's steady window cut into windows of ``window`` s: their starts, ends, levels
    and repetitions."""
    rows = []
    for p in points.iter_rows(named=True):
        edges = np.arange(p["t_start"], p["t_end"] - 0.5 * window + 1e-9, window)
        for a in edges:
            rows.append((p["level"], p["rep"], float(a), float(min(a + window, p["t_end"]))))
    if len(rows) < 2:
        raise InputError("--window", window, "windows short enough for at least two per run")
    level, rep, a, b = (np.array(col) for col in zip(*rows, strict=True))
    return a, b, level, rep


def class_rates(
    client: pl.DataFrame,
    classes: tuple[str, ...],
    a: np.ndarray,
    b: np.ndarray,
    level: np.ndarray,
    rep: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """[W, C] throughput and mean response time of the client requests (column ``cls``) that
    ended in each window."""
    X = np.zeros((a.size, len(classes)))
    R = np.full((a.size, len(classes)), np.nan)
    for c, name in enumerate(classes):
        rows = client.filter(pl.col("cls") == name)
        end = rows["end"].to_numpy()
        rt = end - rows["start"].to_numpy()
        lv, rp = rows["level"].to_numpy(), rows["rep"].to_numpy()
        for w in range(a.size):
            inside = (end >= a[w]) & (end < b[w]) & (lv == level[w]) & (rp == rep[w])
            X[w, c] = inside.sum() / (b[w] - a[w])
            if inside.any():
                R[w, c] = rt[inside].mean()
    return X, R


def window_busy(cpu: pl.DataFrame, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[W] busy cores in each window: the mean of each node's ``cpu_cores`` samples in it,
    summed over the nodes."""
    busy = np.zeros(a.size)
    for _node, part in cpu.group_by("node"):
        tt, v = part["t"].to_numpy(), part["value"].to_numpy()
        for w in range(a.size):
            inside = (tt > a[w]) & (tt <= b[w])
            if inside.any():
                busy[w] += v[inside].mean()
    return busy


def _steady(client: pl.DataFrame, points: pl.DataFrame) -> pl.DataFrame:
    """Client requests that ended inside a point's steady window."""
    parts = []
    for p in points.iter_rows(named=True):
        parts.append(
            client.filter(
                (pl.col("level") == p["level"])
                & (pl.col("rep") == p["rep"])
                & (pl.col("end") >= p["t_start"])
                & (pl.col("end") < p["t_end"])
            )
        )
    return pl.concat(parts)


def exclusive_segments(requests: pl.DataFrame, tiers: tuple[str, ...]) -> pl.DataFrame:
    """Segments (station, node, request, start, end, write) of each tier's records, with the
    time the same request spent in the next tier cut out. ``write`` marks the last tier's
    records that ran at every one of its replicas (the same query of the same request on each:
    a write of a write-all replicated tier); it is never set with one replica. Records of a
    call graph (``visit``, ``parent``) have their calls' records cut out instead (calls made
    in parallel: the time any of them was out)."""
    if "parent" in requests.columns and requests["parent"].is_not_null().any():
        return _call_segments(requests, tiers)
    parts = []
    for i, tier in enumerate(tiers):
        rows = requests.filter(pl.col("tier") == tier)
        detail = pl.col("detail") if "detail" in rows.columns else pl.lit(None, pl.String)
        rows = rows.select(
            pl.col("request_id").alias("request"), "node", "start", "end", detail.alias("detail")
        ).with_row_index("visit")
        if i + 1 < len(tiers):
            holes = (
                requests.filter(pl.col("tier") == tiers[i + 1])
                .select(pl.col("request_id").alias("request"), "start", "end")
                .join(
                    rows.select(
                        "visit", "request", pl.col("start").alias("a"), pl.col("end").alias("b")
                    ),
                    on="request",
                )
                .filter((pl.col("start") >= pl.col("a")) & (pl.col("end") <= pl.col("b")))
                .sort("visit", "start")
                .group_by("visit", maintain_order=True)
                .agg(pl.col("start").alias("h_start"), pl.col("end").alias("h_end"))
            )
            rows = rows.join(holes, on="visit", how="left").with_columns(
                pl.concat_list(pl.col("start"), pl.col("h_end").fill_null([])).alias("s"),
                pl.concat_list(pl.col("h_start").fill_null([]), pl.col("end")).alias("e"),
            )
            rows = rows.select("request", "node", "s", "e").explode("s", "e")
            rows = rows.rename({"s": "start", "e": "end"}).with_columns(
                pl.lit(False).alias("write")
            )
        else:
            replicas = rows["node"].n_unique()
            copies = pl.col("node").n_unique().over("request", "detail")
            write = (copies == replicas) & pl.col("detail").is_not_null() & (replicas > 1)
            rows = rows.select("request", "node", "start", "end", write.alias("write"))
        parts.append(
            rows.with_columns(pl.lit(tier).alias("station")).select(
                "station", pl.col("node").fill_null(tier), "request", "start", "end", "write"
            )
        )
    out = pl.concat(parts)
    return out.filter(pl.col("end") >= pl.col("start"))


def _call_segments(requests: pl.DataFrame, tiers: tuple[str, ...]) -> pl.DataFrame:
    """:func:`exclusive_segments` of call-graph visits: each visit less its calls' records,
    overlapping calls (a parallel fan-out) merged first."""
    rows = requests.filter(pl.col("tier").is_in(tiers), pl.col("visit").is_not_null()).select(
        pl.col("tier").alias("station"),
        pl.col("node").fill_null(pl.col("tier")),
        pl.col("request_id").alias("request"),
        "start",
        "end",
        "visit",
        "parent",
    )
    holes = (
        rows.filter(pl.col("parent").is_not_null())
        .select(pl.col("parent").alias("visit"), "start", "end")
        .sort("visit", "start")
        .with_columns(pl.col("end").cum_max().shift(1).over("visit").alias("reach"))
        .with_columns(
            (pl.col("start") > pl.col("reach")).fill_null(True).cum_sum().over("visit").alias("g")
        )
        .group_by("visit", "g")
        .agg(pl.col("start").min().alias("h_start"), pl.col("end").max().alias("h_end"))
        .sort("visit", "h_start")
        .group_by("visit", maintain_order=True)
        .agg("h_start", "h_end")
    )
    out = (
        rows.join(holes, on="visit", how="left")
        .with_columns(
            pl.concat_list(pl.col("start"), pl.col("h_end").fill_null([])).alias("s"),
            pl.concat_list(pl.col("h_start").fill_null([]), pl.col("end")).alias("e"),
        )
        .select("station", "node", "request", "s", "e")
        .explode("s", "e")
        .rename({"s": "start", "e": "end"})
        .with_columns(pl.lit(False).alias("write"))
    )
    return out.filter(pl.col("end") >= pl.col("start"))


def cpu_intervals(cpu: pl.DataFrame, tiers: tuple[str, ...]) -> pl.DataFrame:
    """``cpu_cores`` samples -> intervals (station, node, t_start, t_end, cores); a sample at t
    covers the time since the node's previous sample, at most :data:`LATE_STEPS` of its usual
    step (the lower quartile of its gaps; a gap longer than that is time the setup was not
    measured: another setup's points, or between two of its own)."""
    frame = (
        cpu.filter(pl.col("tier").is_in(tiers))
        .sort("tier", "node", "t")
        .with_columns(pl.col("t").shift(1).over("tier", "node").alias("t_prev"))
        .with_columns(
            (pl.col("t") - pl.col("t_prev")).quantile(0.25, "lower").over("tier", "node")
            .fill_null(0.05).alias("step")
        )
    )  # fmt: skip
    return frame.select(
        pl.col("tier").alias("station"),
        "node",
        pl.max_horizontal(
            pl.col("t_prev").fill_null(pl.col("t") - pl.col("step")),
            pl.col("t") - LATE_STEPS * pl.col("step"),
        ).alias("t_start"),
        pl.col("t").alias("t_end"),
        pl.col("value").alias("cores"),
    ).filter(pl.col("t_end") > pl.col("t_start"))


def _queue_samples(
    segments: pl.DataFrame, points: pl.DataFrame, tiers: tuple[str, ...], sample: float
) -> tuple[np.ndarray, np.ndarray]:
    """[S, K, 1] exclusive number of requests at each tier every ``sample`` s of the steady
    windows, and [S, 1] the level (the population)."""
    times, pops = [], []
    for p in points.iter_rows(named=True):
        t = np.arange(p["t_start"], p["t_end"], sample)
        times.append(t)
        pops.append(np.full(t.size, p["level"]))
    t = np.concatenate(times)
    Q = np.zeros((t.size, len(tiers), 1))
    for k, tier in enumerate(tiers):
        seg = segments.filter(pl.col("station") == tier)
        s, e = np.sort(seg["start"].to_numpy()), np.sort(seg["end"].to_numpy())
        Q[:, k, 0] = np.searchsorted(s, t, side="right") - np.searchsorted(e, t, side="right")
    return Q, np.concatenate(pops)[:, None]


# ---- simulated runs ------------------------------------------------------------------------------
def _from_simulation(run: Run, *, window: float, by: str, sample: float) -> Observations:
    source = str(run.path)
    model = run.spec
    assert isinstance(model, Model)
    stations = tuple(s.name for s in model.stations if s.type in ("queue", "delay"))
    kinds = {s.name: s for s in model.stations}
    classes = tuple(c.name for c in model.classes)
    metrics, requests, points = run.metrics, run.requests, run.points
    if metrics is None or requests is None or points is None:
        raise InputError("run", source, "a traced simulation (metrics, requests, points)")
    servers = np.array([kinds[s].servers if kinds[s].type == "queue" else 1 for s in stations])
    rows_X, rows_U, rows_R, rows_W = [], [], [], []
    for p in points.iter_rows(named=True):
        m = metrics.filter(
            (pl.col("rep") == p["rep"]) & (pl.col("t") >= p["t_start"]) & (pl.col("t") < p["t_end"])
        ).with_columns(((pl.col("t") - p["t_start"]) // window).alias("w"))
        n_w = int((p["t_end"] - p["t_start"]) // window)
        if n_w < 1:
            continue
        m = m.filter(pl.col("w") < n_w)
        # engine windows are equally long: a mean over them is the window's time average
        util = (
            m.filter(pl.col("metric") == "utilization")
            .group_by("w", "tier")
            .agg(pl.col("value").mean())
        )
        done = m.filter((pl.col("tier") == CLIENT) & (pl.col("metric") == "completions"))
        rt = m.filter((pl.col("tier") == CLIENT) & (pl.col("metric") == "rt_mean"))
        cnt = done.group_by("w", "node").agg(pl.col("value").sum().alias("n"))
        rsum = (
            rt.join(done.select("t", "node", pl.col("value").alias("k")), on=["t", "node"])
            .group_by("w", "node")
            .agg((pl.col("value") * pl.col("k")).sum().alias("s"))
        )
        ci = {c: i for i, c in enumerate(classes)}
        ki = {st: k for k, st in enumerate(stations)}
        n = np.zeros((n_w, len(classes)))
        r_sum = np.zeros((n_w, len(classes)))
        u = np.zeros((n_w, len(stations)))
        for w, node, v in cnt.iter_rows():
            n[int(w), ci[node]] = v
        for w, node, v in rsum.iter_rows():
            r_sum[int(w), ci[node]] = v
        for w, tier, v in util.iter_rows():
            if tier in ki:
                u[int(w), ki[tier]] = v
        with np.errstate(divide="ignore", invalid="ignore"):
            rows_R.extend(np.where(n > 0, r_sum / np.where(n > 0, n, 1), np.nan))
        rows_X.extend(n / window)
        rows_U.extend(u)
        rows_W.extend([window] * n_w)
    if len(rows_X) < 2:
        raise InputError("--window", window, "a window that fits at least twice in the run")
    visits = requests.filter(pl.col("tier") != CLIENT)
    fcfs = [s for s in stations if kinds[s].type == "queue" and kinds[s].discipline == "fcfs"]
    begin = (
        pl.when(pl.col("tier").is_in(fcfs)).then(pl.col("service_start")).otherwise(pl.col("start"))
    )
    segments = visits.filter(pl.col("tier").is_in(stations)).select(
        pl.col("tier").alias("station"),
        pl.col("tier").alias("node"),
        pl.col("request_id").alias("request"),
        begin.alias("start"),
        pl.col("end"),
    )
    steady = _steady(
        requests.filter(pl.col("tier") == CLIENT).with_columns(pl.col("interaction").alias("cls")),
        points,
    )
    servers_of = {
        (s, s): float(kinds[s].servers) if kinds[s].type == "queue" else 1e9 for s in stations
    }
    closed = all(not c.is_open for c in model.classes)
    population = None
    queue, qpop = None, None
    if closed:
        pop = np.array([c.population or 0 for c in model.classes], dtype=float)
        population = np.repeat(pop[None, :], len(rows_X), axis=0)
        queue, qpop = _class_queue_samples(visits, points, stations, classes, sample, pop)
    think = np.array([c.think_time for c in model.classes])
    del by  # a simulation's classes are the model's
    return Observations(
        classes=classes,
        stations=stations,
        throughput=np.array(rows_X),
        servers=servers.astype(float),
        utilization=np.array(rows_U),
        response_time=np.array(rows_R),
        window=np.array(rows_W),
        population=population,
        think_time=think if closed else None,
        queue=queue,
        queue_population=qpop,
        records=RequestRecords(
            requests=steady.select(pl.col("request_id").alias("request"), "cls"),
            segments=segments,
            servers=servers_of,
        ),
        source=source,
    )


def _class_queue_samples(
    visits: pl.DataFrame,
    points: pl.DataFrame,
    stations: tuple[str, ...],
    classes: tuple[str, ...],
    sample: float,
    pop: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    t = np.concatenate(
        [np.arange(p["t_start"], p["t_end"], sample) for p in points.iter_rows(named=True)]
    )
    Q = np.zeros((t.size, len(stations), len(classes)))
    for k, st in enumerate(stations):
        for c, cl in enumerate(classes):
            v = visits.filter((pl.col("tier") == st) & (pl.col("interaction") == cl))
            s, e = np.sort(v["start"].to_numpy()), np.sort(v["end"].to_numpy())
            Q[:, k, c] = np.searchsorted(s, t, side="right") - np.searchsorted(e, t, side="right")
    return Q, np.repeat(pop[None, :], t.size, axis=0)


__all__ = ["ALL", "cpu_intervals", "exclusive_segments", "observations_from_run"]
