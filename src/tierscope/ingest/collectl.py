"""``tierscope import collectl``: collectl's plot files (``collectl -P -f DIR``, plain or
gzipped): the summary (``HOST-DATE.tab``), the per-CPU detail (``.cpu``, ``-sC``) and the
process detail (``.prc``, ``-sZ``).

The host is the component (``# Host:`` of the file's header; its ``TZ:`` gives the zone of the
``#Date Time`` columns, or the times are ``#UTC`` epoch seconds with ``-oU``). What is read:

- summary: ``[CPU]Totl%`` → ``cpu_util`` (of all the host's CPUs) and ``cpu_cores``
  (× ``NumCPUs``), ``[CPU]Wait%`` → ``cpu_iowait``, ``[CPU]ProcQue`` → ``run_queue``,
  ``[MEM]Used`` (KB) → ``mem_bytes`` and ``mem_util`` (of ``[MEM]Tot``),
  ``[MEM]PageMajFaults`` → ``major_faults_s``, ``[NET]RxKBTot``/``TxKBTot`` →
  ``net_rx_bytes_s``/``net_tx_bytes_s``, ``[DSK]ReadKBTot``/``WriteKBTot`` →
  ``disk_read_bytes_s``/``disk_write_bytes_s``;
- per CPU: ``[CPU:n]Totl%`` → ``cpu_util`` of node ``HOST/cpuN`` (then the summary's
  ``cpu_util`` is left out: the CPUs are its nodes, so one saturated CPU shows);
- per process: a component per command (its program's name: ``/usr/bin/python3 x.py`` →
  ``python3``, ``postgres: writer`` → ``postgres``), each process (PID) a node:
  ``PCT`` (percent of one core) → ``cpu_cores``, ``VmRSS`` (KB) → ``mem_bytes``, ``MajF`` →
  ``major_faults_s``, ``RKB``/``WKB`` → ``disk_read_bytes_s``/``disk_write_bytes_s``.

Every other column is left out and counted in the notes.
"""

from __future__ import annotations

import datetime as dt
import gzip
import re
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from tierscope.errors import InputError, clip
from tierscope.ingest._files import Read

#: Summary columns -> (metric, factor) (KB -> bytes, percent -> fraction).
SUMMARY = {
    "[CPU]Totl%": ("cpu_util", 0.01), "[CPU]Wait%": ("cpu_iowait", 0.01),
    "[CPU]ProcQue": ("run_queue", 1.0), "[MEM]Used": ("mem_bytes", 1024.0),
    "[MEM]PageMajFaults": ("major_faults_s", 1.0), "[NET]RxKBTot": ("net_rx_bytes_s", 1024.0),
    "[NET]TxKBTot": ("net_tx_bytes_s", 1024.0), "[DSK]ReadKBTot": ("disk_read_bytes_s", 1024.0),
    "[DSK]WriteKBTot": ("disk_write_bytes_s", 1024.0),
}  # fmt: skip
PROCESS = {
    "PCT": ("cpu_cores", 0.01), "VmRSS": ("mem_bytes", 1024.0), "MajF": ("major_faults_s", 1.0),
    "RKB": ("disk_read_bytes_s", 1024.0), "WKB": ("disk_write_bytes_s", 1024.0),
}  # fmt: skip
_PER_CPU = re.compile(r"^\[CPU:(\d+)\]Totl%$")


def read_collectl(paths: Sequence[Path]) -> Read:
    """collectl plot files, read together (a host's per-CPU file replaces its summary's CPU).
    See the module's docstring."""
    parts: list[pl.DataFrame] = []
    notes: list[str] = []
    per_cpu: set[str] = set()
    for path in paths:
        lines = _lines(path)
        if not lines:  # collectl leaves a detail file empty when nothing matched its filter
            notes.append(f"{path.name}: empty (no samples)")
            continue
        frame, host, said = _read_file(path, lines)
        parts.append(frame)
        notes.append(said)
        if frame.height and frame["node"].str.contains("/cpu").any():
            per_cpu.add(host)
    if not parts:
        raise InputError("file", str(paths[0]), "a collectl plot file with samples",
                         source=str(paths[0]))  # fmt: skip
    frame = pl.concat(parts)
    if per_cpu:  # the CPUs are the host's nodes: its summary cpu_util would double them
        frame = frame.filter(
            ~(pl.col("tier").is_in(sorted(per_cpu)) & (pl.col("metric") == "cpu_util")
              & ~pl.col("node").str.contains("/cpu"))
        )  # fmt: skip
    return Read(frame.sort("tier", "node", "metric", "t"), True, notes)


def _lines(path: Path) -> list[str]:
    src = str(path)
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return raw.decode("utf-8", "replace").splitlines()
    except OSError as exc:
        raise InputError("file", src, f"a readable file ({exc.strerror or exc})",
                         source=src) from None  # fmt: skip
    except (EOFError, gzip.BadGzipFile) as exc:
        raise InputError("file", src, f"a whole gzip file ({clip(str(exc), 80)})",
                         source=src) from None  # fmt: skip


def _read_file(path: Path, lines: list[str]) -> tuple[pl.DataFrame, str, str]:
    """One plot file as long samples, its host and what was read."""
    src = str(path)
    meta = " ".join(ln for ln in lines if ln.startswith("# "))
    host = _field(meta, "Host") or path.name.split("-")[0]
    cpus = float(_field(meta, "NumCPUs") or 0) or None
    zone = _zone(_field(meta, "TZ"), src)
    header_at = next((i for i, ln in enumerate(lines) if ln.startswith(("#Date", "#UTC"))), None)
    if header_at is None:
        raise InputError("header", None, "a collectl plot file (collectl -P): a line starting "
                         "#Date Time or #UTC", source=src)  # fmt: skip
    columns = lines[header_at][1:].split()
    utc = columns[0] == "UTC"
    width = 1 if utc else 2
    process = "Command" in columns
    rows: list[list[str]] = []
    numbers: list[int] = []
    for number, line in enumerate(lines[header_at + 1 :], start=header_at + 2):
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split()
        if process:  # the command (last) may hold spaces
            cells = [*cells[: len(columns) - 1], " ".join(cells[len(columns) - 1 :])]
        if len(cells) != len(columns):
            raise InputError("line", clip(line, 60), f"{len(columns)} columns like the header",
                             source=f"{src}, line {number}")  # fmt: skip
        rows.append(cells)
        numbers.append(number)
    if not rows:
        raise InputError("rows", 0, "samples after the header", source=src)
    table = pl.DataFrame(rows, schema=columns, orient="row").with_columns(
        pl.Series("_line", numbers)
    )
    t = _times(table, columns[:width], zone, src)
    if process:
        frame, kept = _processes(table, t, src)
    else:
        frame, kept = _summary(table, t, host, cpus, src)
    left = len(columns) - width - len(kept)
    said = (f"{path.name}: host {host}, {table.height} samples"
            f"{' of processes' if process else ''}; read {', '.join(kept) or 'nothing'}; "
            f"{left} columns left out")  # fmt: skip
    return frame, host, said


def _field(meta: str, name: str) -> str | None:
    m = re.search(rf"\b{name}:\s*(\S+)", meta)
    return m.group(1) if m else None


def _zone(text: str | None, src: str) -> dt.timezone:
    if text is None:
        return dt.UTC
    m = re.fullmatch(r"([+-])(\d{2}):?(\d{2})", text)
    if m is None:
        raise InputError("TZ", text, "a zone offset like +0100", source=src)
    sign = 1 if m.group(1) == "+" else -1
    return dt.timezone(sign * dt.timedelta(hours=int(m.group(2)), minutes=int(m.group(3))))


def _times(table: pl.DataFrame, columns: list[str], zone: dt.timezone, src: str) -> pl.Series:
    if columns == ["UTC"]:
        t = table["UTC"].cast(pl.Float64, strict=False)
        column = "UTC"
    else:
        text = table["Date"] + " " + table["Time"]
        local = text.str.to_datetime("%Y%m%d %H:%M:%S%.f", strict=False)
        t = local.dt.epoch("us").cast(pl.Float64) / 1e6 - zone.utcoffset(None).total_seconds()
        column = "Time"
    bad = t.is_null().arg_true()
    if bad.len():
        i = int(bad[0])
        raise InputError(column, table[column][i], "a collectl time (YYYYMMDD HH:MM:SS[.mmm])",
                         source=f"{src}, line {int(table['_line'][i])}")  # fmt: skip
    return t


def _values(table: pl.DataFrame, column: str, src: str) -> pl.Series:
    values = table[column].cast(pl.Float64, strict=False)
    bad = (values.is_null() | ~values.is_finite() | (values < 0)).arg_true()
    if bad.len():
        i = int(bad[0])
        raise InputError(column, table[column][i], "a number >= 0",
                         source=f"{src}, line {int(table['_line'][i])}")  # fmt: skip
    return values


def _summary(
    table: pl.DataFrame, t: pl.Series, host: str, cpus: float | None, src: str
) -> tuple[pl.DataFrame, list[str]]:
    series: list[tuple[str, str, pl.Series]] = []
    kept = []
    for column in table.columns:
        cpu = _PER_CPU.match(column)
        if column in SUMMARY:
            metric, factor = SUMMARY[column]
            values = _values(table, column, src) * factor
            series.append((host, metric, values))
            if column == "[CPU]Totl%" and cpus:
                series.append((host, "cpu_cores", values * cpus))
            kept.append(column)
        elif cpu is not None:
            values = _values(table, column, src) * 0.01
            series.append((f"{host}/cpu{cpu.group(1)}", "cpu_util", values))
            kept.append(column)
    if "[MEM]Used" in table.columns and "[MEM]Tot" in table.columns:
        total = _values(table, "[MEM]Tot", src)
        used = _values(table, "[MEM]Used", src)
        series.append((host, "mem_util", used / total.replace(0, None)))
        kept.append("[MEM]Tot")
    frame = pl.concat(
        [pl.DataFrame({"t": t, "tier": host, "node": node, "metric": metric, "value": v})
         for node, metric, v in series]
        or [_empty()]
    ).drop_nulls("value")  # fmt: skip
    return frame, kept


def _processes(table: pl.DataFrame, t: pl.Series, src: str) -> tuple[pl.DataFrame, list[str]]:
    program = (
        table["Command"]
        .str.extract(r"^(\S+)")
        .str.replace(r":$", "")
        .str.replace(r"^.*/", "")
        .str.replace(r"^\[(.*)\]$", "${1}")
    )
    base = pl.DataFrame({"t": t, "tier": program, "node": program + "/" + table["PID"]})
    kept = [c for c in PROCESS if c in table.columns]
    parts = [
        base.with_columns(pl.lit(PROCESS[c][0]).alias("metric"),
                          (_values(table, c, src) * PROCESS[c][1]).alias("value"))
        for c in kept
    ]  # fmt: skip
    return pl.concat(parts or [_empty()]), [*kept, "PID", "Command"]


def _empty() -> pl.DataFrame:
    return pl.DataFrame(
        schema={"t": pl.Float64, "tier": pl.String, "node": pl.String, "metric": pl.String,
                "value": pl.Float64}
    )  # fmt: skip


__all__ = ["read_collectl"]
