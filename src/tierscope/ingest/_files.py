"""Reading users' files: every failure an InputError naming the file, never a traceback."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tierscope.errors import InputError, clip

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
