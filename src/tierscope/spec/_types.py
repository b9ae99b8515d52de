"""Number types shared by the file schemas.

Design decision: pydantic reads ``true`` as 1 wherever a number is expected; in a model or spec
file that is always a slip (``population: true``), so every number type here refuses booleans
before pydantic converts them. Everything else (``5``, ``5.0``, ``"5"``) is read as before.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, Field, ValidationError

from tierscope.errors import SpecError


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}")
    return value


NotBool = BeforeValidator(_not_bool)

Number = Annotated[float, NotBool, Field(allow_inf_nan=False)]
PositiveFloat = Annotated[float, NotBool, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, NotBool, Field(ge=0, allow_inf_nan=False)]
Probability = Annotated[float, NotBool, Field(ge=0, le=1, allow_inf_nan=False)]
Integer = Annotated[int, NotBool]
PositiveInt = Annotated[int, NotBool, Field(ge=1)]
NonNegInt = Annotated[int, NotBool, Field(ge=0)]


__all__ = [
    "Integer",
    "NonNegFloat",
    "NonNegInt",
    "NotBool",
    "Number",
    "PositiveFloat",
    "PositiveInt",
    "Probability",
    "validated",
]


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], doc: Any, source: str) -> M:
    """``doc`` as a ``model`` (a spec document or part of one); SpecError naming ``source``
    and each bad field."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        problems = [
            (".".join(str(p) for p in e["loc"]), e["msg"].removeprefix("Value error, "))
            for e in exc.errors()
        ]
        raise SpecError(source, problems) from None
