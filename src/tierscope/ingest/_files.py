"""Reading users' files: every failure an InputError naming the file, never a traceback."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from tierscope.errors import InputError, clip
from tierscope.spec.graph import Graph


@dataclass
class Read:
    """One file read: long metric samples (t, tier, node, metric, value), whether the times
    are absolute, and what the import says about it."""

    frame: pl.DataFrame
    absolute: bool
    notes: list[str] = field(default_factory=list)
    #: Requests (``tier, request_id, start, end, level, rep, interaction, status`` and any
    #: extras such as ``visit``, ``parent``) and load-level points, where the format has them.
    requests: pl.DataFrame | None = None
    points: pl.DataFrame | None = None
    #: The call graph the data shows (trace parents), when it shows one.
    calls: Graph | None = None


#: Longest header line read (a longer one is not a header of a table).
MAX_HEADER_BYTES = 256 * 1024


def read_table(path: Path) -> pl.DataFrame:
    """A CSV file as text columns (stripped names) with its line numbers in ``_line``."""
    src = str(path)
    if not path.is_file():
        raise InputError("file", src, "an existing file", source=src)
    try:
        with path.open("rb") as fh:
            head = fh.read(MAX_HEADER_BYTES + 1)
    except OSError as exc:
        raise InputError("file", src, f"a readable file ({exc.strerror})", source=src) from None
    if len(head) > MAX_HEADER_BYTES and b"\n" not in head:
        raise InputError(
            "header",
            head[:80].decode("utf-8", "replace"),
            f"a header line shorter than {MAX_HEADER_BYTES // 1024} KiB",
            source=src,
        )
    levels = _pandas_header(head)
    try:
        if levels is None:
            frame = pl.read_csv(
                path, infer_schema=False, null_values=[""], truncate_ragged_lines=False
            )
        else:
            names, skip = levels
            frame = pl.read_csv(
                path, infer_schema=False, null_values=[""], truncate_ragged_lines=False,
                has_header=False, skip_rows=skip, new_columns=names,
            )  # fmt: skip
    except pl.exceptions.NoDataError:
        raise InputError("header", "", "a header row and data rows", source=src) from None
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as exc:
        raise InputError(
            "file", src, f"a readable CSV file ({clip(str(exc), 200)})", source=src
        ) from None
    names = [c.strip() for c in frame.columns]
    if len(set(names)) < len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise InputError(dup, None, "column names that appear once", source=src)
    if frame.height == 0:
        raise InputError("rows", 0, "data rows (the file is empty but for its header)", source=src)
    first = 2 if levels is None else levels[1] + 1
    return frame.rename(dict(zip(frame.columns, names, strict=True))).with_row_index(
        "_line", offset=first
    )


def _pandas_header(head: bytes) -> tuple[list[str], int] | None:
    """A header of several rows as pandas writes a frame with column levels
    (``to_csv`` of a MultiIndex): rows of level names, then a row naming the index with every
    other cell empty. The columns become ``<level 0>.<level 1>_<level 2>…`` (the component,
    then the metric); returns the names and the rows to skip, None for a one-row header."""
    import csv
    import io

    lines = head.decode("utf-8", "replace").splitlines()[:12]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    width = len(rows[0]) if rows else 0
    for k in range(2, min(len(rows), 10)):
        row = rows[k]
        if len(row) != width or any(len(r) != width for r in rows[:k]):
            return None
        if row[0] and not any(c.strip() for c in row[1:]):
            names = [row[0]] + [
                rows[0][i] + "." + "_".join(r[i] for r in rows[1:k]).lower()
                for i in range(1, width)
            ]
            return names, k + 1
    return None


def require_columns(
    table: pl.DataFrame, required: tuple[str, ...], expected: str, src: str
) -> None:
    """InputError naming the first of ``required`` the table lacks; ``expected`` says what the
    file should be."""
    missing = [c for c in required if c not in table.columns]
    if missing:
        raise InputError(missing[0], None, expected, source=src)


def line_of(table: pl.DataFrame, mask: pl.Series) -> int | None:
    """The file line (``_line``) of the first row where ``mask`` holds, None if none does."""
    hit = mask.fill_null(False).arg_true()
    return None if hit.len() == 0 else int(table["_line"][int(hit[0])])


def reject(table: pl.DataFrame, mask: pl.Series, column: str, expected: str, src: str) -> None:
    """InputError naming the file, the line and the column (and the value as written) of the
    first row where ``mask`` holds."""
    hit = mask.fill_null(False).arg_true()
    if hit.len():
        i = int(hit[0])
        value = table[column][i] if column in table.columns else None
        raise InputError(column, value, expected, source=f"{src}, line {int(table['_line'][i])}")


def numbers(table: pl.DataFrame, column: str, src: str, *, non_negative: bool = False) -> pl.Series:
    """A text column's values as floats (null where empty); InputError naming the file, the
    line and the column for what is not a finite number (or is negative, ``non_negative``)."""
    text = table[column].cast(pl.String).str.strip_chars()
    values = text.cast(pl.Float64, strict=False)
    reject(table, text.is_not_null() & (text != "") & values.is_null(), column, "a number", src)
    reject(table, values.is_nan(), column,
           "a number (NaN is no measurement: leave the cell empty)", src)  # fmt: skip
    reject(table, values.is_infinite(), column, "a finite number", src)
    if non_negative:
        reject(table, values < 0, column, "a value >= 0", src)
    return values
