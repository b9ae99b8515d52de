"""Times as exported by the tools people use, to seconds.

Numbers are relative seconds, or Unix epoch times whose unit is told by their magnitude
(seconds from 1e9, milliseconds from 1e12, microseconds from 1e15, nanoseconds from 1e18: the
years 2001 to 2286 in each unit), unless the user gives ``--time-unit``. Text is ISO 8601 with
``T`` or a space between date and time, fractions of a second, and a zone (``Z``, ``+02:00``)
or none: a time without a zone is in ``--tz`` (default UTC). Every time comes out as float
seconds, absolute times as epoch seconds; a value that is none of these is an
:class:`InputError` naming the file, the line and the column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl

from tierscope.errors import InputError

TimeUnit = Literal["s", "ms", "us", "ns"]
#: Seconds per unit.
SECONDS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
#: Where epoch times start in each unit (2001-09-09 in seconds).
EPOCH_FROM: dict[str, float] = {"s": 1e9, "ms": 1e12, "us": 1e15, "ns": 1e18}
#: Unix epoch seconds end with the year 9999.
EPOCH_MAX_S = 253_402_300_799.0
_ZONED = r"(?:Z|z|[+-]\d{2}:?\d{2})$"


@dataclass(frozen=True)
class Times:
    """A time column in seconds: ``absolute`` (epoch seconds) or relative; ``said`` how it was
    read, for the import's report (e.g. "epoch milliseconds")."""

    seconds: pl.Series
    absolute: bool
    said: str


def check_tz(tz: str | None) -> ZoneInfo | None:
    if tz is None:
        return None
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError("--tz", tz, "an IANA time zone such as UTC or Europe/Paris") from None


def epoch_unit(values: pl.Series) -> str | None:
    """The epoch unit of numbers by their magnitude (None: below 1e9, relative seconds)."""
    finite = values.filter(values.is_finite())
    if finite.len() == 0:
        return None
    typical = float(finite.abs().quantile(0.5, "higher"))  # type: ignore[arg-type]
    for unit in ("ns", "us", "ms", "s"):
        if typical >= EPOCH_FROM[unit]:
            return unit
    return None


def parse_times(
    raw: pl.Series,
    *,
    source: str,
    column: str,
    first_line: int = 2,
    unit: str | None = None,
    tz: str | None = None,
    lines: Sequence[int] | None = None,
) -> Times:
    """``raw`` (text or numbers; null where empty) as seconds; ``first_line``: the file's line
    of the first value, or ``lines`` each value's (for messages); ``unit``: the unit of
    numbers when the user says so."""
    if unit is not None and unit not in SECONDS:
        raise InputError("--time-unit", unit, "one of " + ", ".join(SECONDS))
    zone = check_tz(tz)
    text = raw.cast(pl.String).str.strip_chars()
    numbers = text.cast(pl.Float64, strict=False)
    given = text.is_not_null() & (text != "")

    def bad(mask: pl.Series, expected: str) -> None:
        hit = mask.arg_true()
        if hit.len():
            i = int(hit[0])
            line = lines[i] if lines is not None else first_line + i
            raise InputError(column, text[i], expected, source=f"{source}, line {line}")

    if not (given & numbers.is_null()).any():  # numbers
        chosen = unit or epoch_unit(numbers)
        if chosen is None:
            return Times(numbers, False, "seconds from the start")
        seconds = numbers * SECONDS[chosen]
        bad(
            given & (numbers < EPOCH_FROM[chosen] / 10),
            f"an epoch time in {_UNIT_WORDS[chosen]} like the other rows",
        )
        bad(given & (seconds.abs() > EPOCH_MAX_S), f"an epoch time in {_UNIT_WORDS[chosen]}")
        said = f"epoch {_UNIT_WORDS[chosen]}" + ("" if unit else " (from their magnitude)")
        return Times(seconds, True, said)
    bad(given & numbers.is_not_null(), "a date-time like the other rows (not a number)")
    parsed, zoned = _iso(text, zone.key if zone else "UTC")
    bad(given & parsed.is_null(), "a time: seconds, epoch seconds/ms/us/ns or ISO 8601")
    seconds = (parsed.dt.epoch("us").cast(pl.Float64) / 1e6).rename(raw.name or column)
    where = (
        ""
        if bool(zoned.filter(given).all())
        else f" (no zone given: {zone.key if zone else 'UTC'})"
    )
    return Times(seconds, True, "ISO 8601 date-times" + where)


def _iso(text: pl.Series, tz: str) -> tuple[pl.Series, pl.Series]:
    """ISO 8601 text as UTC date-times (null where it is not one), and which rows had a zone;
    rows without one are in ``tz``."""
    iso = text.str.replace(r"^(\d{4}-\d{2}-\d{2})[ T]", "${1}T")
    zoned = iso.str.contains(_ZONED).fill_null(False)
    offset = iso.str.replace(r"[Zz]$", "+00:00").str.replace(r"([+-]\d{2})(\d{2})$", "${1}:${2}")
    aware = offset.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%:z", strict=False, time_zone="UTC")
    naive = pl.select(
        pl.coalesce(
            pl.lit(iso).str.to_datetime(f, strict=False)
            for f in ("%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M", "%Y-%m-%d")
        )
    ).to_series()
    local = naive.dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null")
    utc = pl.select(
        pl.when(pl.lit(zoned))
        .then(pl.lit(aware))
        .otherwise(pl.lit(local).dt.convert_time_zone("UTC"))
    ).to_series()
    return utc, zoned


_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}


__all__ = ["SECONDS", "Times", "check_tz", "epoch_unit", "parse_times"]
