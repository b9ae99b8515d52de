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
    try:
        frame = pl.read_csv(path, infer_schema=False, null_values=[""], truncate_ragged_lines=False)
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
        raise InputError("rows", 0, "data rows (the file has only a header)", source=src)
    return frame.rename(dict(zip(frame.columns, names, strict=True))).with_row_index(
        "_line", offset=2
    )
