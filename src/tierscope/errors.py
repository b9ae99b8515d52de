"""Exception types shared by all tierscope modules.

Design decisions: input validation errors carry structured fields (field, value, expected and an
optional source such as a file path) so callers can report them precisely; ``InputError`` also
subclasses ``ValueError`` so generic handlers keep working. Every message is built here, and
here alone its parts are cut short (:func:`clip`) and kept on one line: a value can be a 64 MB
column name or a multi-line library message, and the user needs to recognise it, not to read it
back in full.
"""

from __future__ import annotations

import reprlib

#: Longest value, field or location shown in a message (characters, "…" included).
VALUE_CHARS = 80
#: Longest "expected ..." text and longest file name (sources are cut in the middle, so the
#: file's own name stays visible).
TEXT_CHARS = 320
SOURCE_CHARS = 120
#: Most problems a :class:`SpecError` lists, one per line; the rest are counted.
MAX_PROBLEMS = 20

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_repr = reprlib.Repr()
_repr.maxstring = VALUE_CHARS
_repr.maxother = VALUE_CHARS
_repr.maxlist = _repr.maxtuple = _repr.maxset = _repr.maxdict = 8
_repr.maxlevel = 3


def clip(text: object, limit: int = VALUE_CHARS, *, middle: bool = False) -> str:
    """``text`` on one line (control characters escaped), cut to ``limit`` characters with "…".

    ``middle`` keeps both ends (for paths). Costs O(limit), whatever the length of ``text``.
    """
    s = text if isinstance(text, str) else str(text)
    if len(s) <= limit and s.isprintable():
        return s
    line = _one_line(s[: limit + 1])  # escaping only lengthens: limit + 1 characters tell
    if len(s) <= limit and len(line) <= limit:
        return line
    if not middle:
        return line[: limit - 1] + "…"
    keep = (limit - 1) // 2
    rest = limit - 1 - keep
    return _one_line(s[:keep])[:keep] + "…" + _one_line(s[-rest:])[-rest:]


def _one_line(s: str) -> str:
    if s.isprintable():
        return s
    return "".join(
        c if c.isprintable() else _ESCAPES.get(c, f"\\x{ord(c):02x}" if ord(c) < 256 else "?")
        for c in s
    )


def show_value(value: object) -> str:
    """``repr(value)`` bounded in size and time (long strings, big or deep containers)."""
    try:
        text = repr(value[: 2 * VALUE_CHARS]) if isinstance(value, str) else _repr.repr(value)
    except Exception:  # a value whose repr fails still gets a message
        text = f"<{type(value).__name__}>"
    return clip(text)


class TierscopeError(Exception):
    """Base class of all tierscope errors."""


class InputError(TierscopeError, ValueError):
    """An argument or input record does not satisfy its contract."""

    def __init__(
        self, field: str, value: object, expected: str, *, source: str | None = None
    ) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        self.source = source
        message = (
            f"field '{clip(field)}': expected {clip(expected, TEXT_CHARS)}, got {show_value(value)}"
        )
        if source is not None:
            message = f"{clip(source, SOURCE_CHARS, middle=True)}: {message}"
        super().__init__(message)


class UnstableError(InputError):
    """A queue with an infinite buffer is offered a load at or above its capacity (rho >= 1)."""


class UnsupportedModelError(InputError):
    """The chosen method cannot solve this model (e.g. fork/join stations, analytic method)."""


class SpecError(InputError):
    """A file failed schema validation; ``errors`` lists every problem as (location, message).

    The message has one line per problem, at most :data:`MAX_PROBLEMS` of them.
    """

    def __init__(self, source: str, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        first_loc, first_msg = errors[0] if errors else ("", "invalid")
        super().__init__(first_loc or "<root>", None, first_msg, source=source)
        where = clip(source, SOURCE_CHARS, middle=True)
        lines = [
            f"{where}: field '{clip(loc or '<root>')}': {clip(msg, TEXT_CHARS)}"
            for loc, msg in errors[:MAX_PROBLEMS]
        ]
        if len(errors) > MAX_PROBLEMS:
            lines.append(f"{where}: … and {len(errors) - MAX_PROBLEMS:,} more problems")
        self.args = ("\n".join(lines),)

    def __str__(self) -> str:
        return str(self.args[0])


__all__ = [
    "InputError",
    "SpecError",
    "TierscopeError",
    "UnstableError",
    "UnsupportedModelError",
    "clip",
    "show_value",
]
