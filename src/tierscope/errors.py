"""Exception types shared by all tierscope modules.

Design decision: input validation errors carry structured fields (field, value, expected and an
optional source such as a file path) so callers can report them precisely; ``InputError`` also
subclasses ``ValueError`` so generic handlers keep working.
"""

from __future__ import annotations


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
        message = f"field '{field}': expected {expected}, got {value!r}"
        if source is not None:
            message = f"{source}: {message}"
        super().__init__(message)


class UnstableError(InputError):
    """A queue with an infinite buffer is offered a load at or above its capacity (rho >= 1)."""


class UnsupportedModelError(InputError):
    """The chosen method cannot solve this model (e.g. fork/join stations, analytic method)."""


class SpecError(InputError):
    """A file failed schema validation; ``errors`` lists every problem as (location, message)."""

    def __init__(self, source: str, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        first_loc, first_msg = errors[0] if errors else ("", "invalid")
        super().__init__(first_loc or "<root>", None, first_msg, source=source)
        lines = [f"{source}: field '{loc or '<root>'}': {msg}" for loc, msg in errors]
        self.args = ("\n".join(lines),)

    def __str__(self) -> str:
        return str(self.args[0])


__all__ = [
    "InputError",
    "SpecError",
    "TierscopeError",
    "UnstableError",
    "UnsupportedModelError",
]
