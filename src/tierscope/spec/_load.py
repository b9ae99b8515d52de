"""Reading YAML documents with errors that name the file and line (no tracebacks for users)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tierscope.errors import SpecError


def load_yaml(path: str | Path) -> Any:
    """Decode a YAML file; a missing file or malformed YAML raises :class:`SpecError`."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(source, [("", f"cannot read file: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError:
        raise SpecError(source, [("", "file is not UTF-8 text")]) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(source, [("", f"malformed YAML{where}: {problem}")]) from None
