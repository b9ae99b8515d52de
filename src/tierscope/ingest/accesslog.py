"""``tierscope import access-log``: web servers' access logs, read with the log format the
server was given (``--log-format``, copied from nginx's ``log_format`` or Apache's
``LogFormat``).

nginx formats name variables (``$time_local``, ``$request_time``...); Apache formats use
directives (``%t``, ``%D``...). What is read:

- the time: nginx ``$msec`` (epoch seconds), ``$time_iso8601`` or ``$time_local``, written
  when the response ended; Apache ``%t`` or ``%{msec}t`` (epoch milliseconds), when the request
  came (``%{end:...}t`` forms are not read);
- the response time: nginx ``$request_time`` (seconds), Apache ``%D`` (microseconds), ``%T``
  (seconds), ``%{ms}T`` or ``%{us}T``;
- ``$upstream_response_time`` (seconds; several upstreams tried add up; ``-`` is none): the
  time in the upstream component (``--upstream``), placed at the end of the request;
- the status (``$status``, ``%>s``, ``%s``; 5xx is a failure) and the request line
  (``$request``, ``%r``: its method and path, without the query, name the interaction).

Each line becomes a request at the component (``--component``; the server's name by default)
and, with an upstream time, a visit of the upstream it called; the front server's own time
stands in for the end-to-end one (tier ``client``). Per component and second:
``throughput_s``, ``errors_s``, ``rt_mean``, ``rt_p95``.

Design decision: the format becomes one regular expression (each variable matches up to the
literal that follows it), run over all lines at once by polars; a line that does not match is
an :class:`InputError` naming the file and the line.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from tierscope.errors import InputError, clip
from tierscope.ingest._client import CLIENT, per_second
from tierscope.ingest._files import Read, reject
from tierscope.ingest._time import check_tz
from tierscope.spec.graph import Call, Component, Graph

#: Apache directives tierscope reads -> the nginx variable they match.
APACHE = {
    "t": "time_apache", "{msec}t": "msec_apache", "D": "duration_us", "T": "request_time",
    "{ms}T": "duration_ms", "{us}T": "duration_us", "{s}T": "request_time", ">s": "status",
    "s": "status", "<s": "status", "r": "request",
}  # fmt: skip
#: Time fields, first found first: nginx's are written when the response ended, Apache's when
#: the request came.
TIMES = ("msec", "time_iso8601", "time_local", "time_apache", "msec_apache")
ARRIVALS = ("time_apache", "msec_apache")
DURATIONS = {"request_time": 1.0, "duration_ms": 1e-3, "duration_us": 1e-6}
_NGINX_VAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_APACHE_DIR = re.compile(r"%[<>]?(?:\{[^}]*\})?[A-Za-z%]")
MAX_LINES = 50_000_000


def compile_format(fmt: str) -> tuple[str, list[str], str]:
    """The regular expression of a log format, the names of its groups (nginx variable names;
    Apache directives as :data:`APACHE` maps them, others as ``_<n>``) and the style
    (``nginx`` or ``apache``)."""
    style = "nginx" if _NGINX_VAR.search(fmt) else "apache" if _APACHE_DIR.search(fmt) else ""
    if not style:
        raise InputError("--log-format", fmt, "nginx's $variables or Apache's %directives")
    pattern = _NGINX_VAR if style == "nginx" else _APACHE_DIR
    parts: list[str | tuple[str]] = []
    at = 0
    for m in pattern.finditer(fmt):
        parts.append(fmt[at : m.start()])
        if style == "nginx":
            parts.append((m.group(1) or m.group(2),))
        elif m.group(0) == "%%":
            parts.append("%")
        else:
            directive = m.group(0)[1:]
            parts.append((APACHE.get(directive, ""),))
        at = m.end()
    parts.append(fmt[at:])
    regex, names, seen = "^", [], set()
    for i, part in enumerate(parts):
        if isinstance(part, str):
            regex += re.escape(part)
            continue
        name = part[0] or f"_{i}"
        following = next((p for p in parts[i + 1 :] if isinstance(p, str) and p), "")
        if name in seen:  # the same variable twice: match it, keep the first
            name = f"_{i}"
        seen.add(name)
        names.append(name)
        if name == "time_apache":  # [day/month/year:hh:mm:ss zone], brackets included
            regex += rf"\[(?P<{name}>[^\]]*)\]"
        elif following:
            regex += f"(?P<{name}>[^{re.escape(following[0])}]*)"
        else:
            regex += f"(?P<{name}>.*)"
    return regex + "$", names, style


def read_access_log(
    path: Path,
    *,
    log_format: str | None = None,
    component: str | None = None,
    upstream: str = "upstream",
    tz: str | None = None,
) -> Read:
    """One access log (see the module's docstring)."""
    src = str(path)
    if not log_format:
        raise InputError(
            "--log-format", None, "the server's log format (nginx log_format or Apache LogFormat)"
        )
    regex, names, style = compile_format(log_format)
    when = next((n for n in TIMES if n in names), None)
    took = next((n for n in DURATIONS if n in names), None)
    if when is None or took is None:
        raise InputError("--log-format", clip(log_format, 80),
                         "a format with a time ($msec, $time_local, $time_iso8601, %t) and a "
                         "response time ($request_time, %D, %T)")  # fmt: skip
    name = component or style
    check_tz(tz)
    try:
        lines = pl.read_csv(path, has_header=False, separator="\x1f", quote_char=None,
                            new_columns=["line"], infer_schema=False, n_rows=MAX_LINES,
                            truncate_ragged_lines=True)  # fmt: skip
    except pl.exceptions.NoDataError:
        raise InputError("file", src, "log lines (the file is empty)", source=src) from None
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError("file", src, f"a readable log ({clip(str(exc), 120)})",
                         source=src) from None  # fmt: skip
    lines = lines.with_row_index("_line", offset=1).filter(
        pl.col("line").is_not_null() & (pl.col("line").str.strip_chars() != "")
    )
    if lines.height == 0:
        raise InputError("file", src, "log lines (the file is empty)", source=src)
    try:
        fields = lines.select("_line", pl.col("line").str.extract_groups(regex)).unnest("line")
    except pl.exceptions.PolarsError as exc:
        expected = f"a format tierscope can read ({clip(str(exc), 100)})"
        raise InputError("--log-format", clip(log_format, 80), expected) from None
    missed = fields.filter(pl.col(names[0]).is_null())
    if missed.height:
        line = int(missed["_line"][0])
        text = lines.filter(pl.col("_line") == line)["line"][0]
        raise InputError("line", clip(text, 80), f"a line in the format {clip(log_format, 80)}",
                         source=f"{src}, line {line}")  # fmt: skip
    end = _times(fields, when, src, tz)
    seconds = _seconds(fields, took, src) * DURATIONS[took]
    start, stop = (end, end + seconds) if when in ARRIVALS else (end - seconds, end)
    status = _status(fields, src)
    interaction = (
        fields["request"].str.extract(r"^(\S+\s+[^?\s]*)")
        if "request" in fields.columns
        else pl.Series([None] * fields.height, dtype=pl.String)
    )
    ids = pl.Series([f"{path.name}:{n}" for n in fields["_line"]])
    front = pl.DataFrame({
        "tier": name, "request_id": ids, "start": start, "end": stop, "visit": "f" + ids,
        "parent": pl.Series([None] * fields.height, dtype=pl.String),
        "interaction": interaction, "status": status,
    })  # fmt: skip
    frames = [front, front.with_columns(pl.lit(CLIENT).alias("tier"),
                                        pl.lit(None, pl.String).alias("visit"))]  # fmt: skip
    calls = None
    notes = [f"{path.name}: {fields.height} requests; times from {when}, response times from "
             f"{took} ({style} format); {int((status == 'error').sum())} failed (5xx)"]  # fmt: skip
    if "upstream_response_time" in fields.columns:
        up = _upstream(fields, src)
        has = up.is_not_null()
        # nginx rounds both times to the millisecond on their own: an upstream time can pass
        # the request's by one; the visit is kept inside the request it served
        frames.append(
            front.filter(has).with_columns(
                pl.lit(upstream).alias("tier"),
                pl.max_horizontal(pl.col("end") - up.filter(has), pl.col("start")).alias("start"),
                ("u" + ids.filter(has)).alias("visit"),
                pl.col("visit").alias("parent"),
            )
        )
        calls = Graph.build([Component(name, calls=(Call(upstream, p=float(has.mean() or 0)),)),
                             Component(upstream)], name)  # fmt: skip
        notes.append(f"{path.name}: {int(has.sum())} requests went to {upstream}")
    requests = pl.concat(frames, how="diagonal_relaxed").with_columns(
        pl.lit(None, pl.Float64).alias("level"), pl.lit(0, pl.Int64).alias("rep")
    )
    return Read(per_second(requests.filter(pl.col("tier") != CLIENT)), True, notes,
                requests=requests, calls=calls)  # fmt: skip


def _times(fields: pl.DataFrame, when: str, src: str, tz: str | None) -> pl.Series:
    text = fields[when].str.strip_chars()
    if when in ("msec", "msec_apache"):  # nginx: seconds.milliseconds; Apache: milliseconds
        out = text.cast(pl.Float64, strict=False) * (1e-3 if when == "msec_apache" else 1.0)
    else:
        fmt = "%d/%b/%Y:%H:%M:%S %z" if when in ("time_local", "time_apache") else None
        if fmt is None:
            from tierscope.ingest._time import parse_times

            return parse_times(text, source=src, column=when, tz=tz,
                               lines=fields["_line"].to_list()).seconds  # fmt: skip
        parsed = text.str.to_datetime(fmt, strict=False, time_zone="UTC")
        out = parsed.dt.epoch("us").cast(pl.Float64) / 1e6
    reject(fields, out.is_null(), when, "a time", src)
    return out


def _seconds(fields: pl.DataFrame, column: str, src: str) -> pl.Series:
    values = fields[column].str.strip_chars().cast(pl.Float64, strict=False)
    reject(fields, values.is_null() | ~values.is_finite() | (values < 0), column,
            "a duration >= 0", src)  # fmt: skip
    return values


def _status(fields: pl.DataFrame, src: str) -> pl.Series:
    if "status" not in fields.columns:
        return pl.Series(["ok"] * fields.height)
    code = fields["status"].str.strip_chars().cast(pl.Int64, strict=False)
    reject(fields, code.is_null(), "status", "an HTTP status code", src)
    return pl.select(pl.when(pl.lit(code) >= 500).then(pl.lit("error")).otherwise(pl.lit("ok"))
                     ).to_series()  # fmt: skip


def _upstream(fields: pl.DataFrame, src: str) -> pl.Series:
    """``$upstream_response_time``: seconds, several (``, `` or `` : `` between upstreams
    tried) added up, ``-`` none."""
    text = fields["upstream_response_time"].str.strip_chars()
    values = (
        text.str.replace_all(r"\s*:\s*", ",")
        .str.split(",")
        .list.eval(pl.element().str.strip_chars().cast(pl.Float64, strict=False))
    )
    total = values.list.sum()
    bad = values.list.eval(pl.element().is_null()).list.any() & (text != "-")
    reject(fields, bad, "upstream_response_time", "seconds, or - (no upstream)", src)
    return pl.select(pl.when(pl.lit(text) == "-").then(None).otherwise(pl.lit(total))).to_series()


__all__ = ["compile_format", "read_access_log"]
