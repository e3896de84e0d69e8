"""The policy keys of per-call routing: a feature's ``by_batch`` rows and ``dtypes``.

Checked from the values of those keys alone (the feature model calls :func:`check_routes`), so
this module needs nothing of :mod:`.model`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from kernelpolicy.dtypes import DTYPE_NAMES, ROUTING_VARIABLES
from kernelpolicy.limits import MAX_BATCH_BOUND

ContextType = Literal["bool", "int", "double", "string"]


class BatchRoute(BaseModel):
    """One row of a feature's ``by_batch``: for a call whose ``batch`` (rows of the input) is
    in ``[min, max]``, try the implementations of ``prefer`` first, in that order, then the
    rest of the feature's order. ``reference`` says what was measured (shown by explain)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: StrictInt = 1
    max: StrictInt | None = None
    prefer: list[str] = Field(min_length=1)
    reference: str | None = None

    @field_validator("min", "max")
    @classmethod
    def _bound(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= MAX_BATCH_BOUND:
            raise ValueError(
                f"batch bound {value} is outside 1 to MAX_BATCH_BOUND ({MAX_BATCH_BOUND})"
            )
        return value

    @model_validator(mode="after")
    def _range(self) -> BatchRoute:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max {self.max} is below min {self.min}: an empty batch range")
        names = self.prefer
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"prefer lists {twice[0]!r} twice")
        return self


def dtype_names(value: list[str]) -> list[str]:
    """Names ``kernelpolicy verify`` checks (and so evidence can pass), each once."""
    for name in value:
        if name not in DTYPE_NAMES:
            raise ValueError(
                f"dtype {name[:40]!r} is not one kernelpolicy verify checks; expected "
                f"some of {', '.join(DTYPE_NAMES)}"
            )
    if len(set(value)) != len(value):
        raise ValueError("a dtype is listed twice")
    return value


def check_routes(
    by_batch: Sequence[BatchRoute],
    dtypes: Sequence[str],
    context: Mapping[str, ContextType],
    names: list[str],
) -> None:
    """A feature's ``by_batch`` rows name only its candidates (``names``), and a ``batch`` or
    ``dtype`` its ``context`` declares has the type routing gives it."""
    for index, row in enumerate(by_batch):
        unknown = [n for n in row.prefer if n not in names]
        if unknown:
            raise ValueError(
                f"by_batch[{index}].prefer: {unknown[0][:40]!r} is not one of the candidates "
                f"{names}"
            )
    used = {"batch": bool(by_batch), "dtype": bool(dtypes)}
    for variable, kind in ROUTING_VARIABLES.items():
        declared = context.get(variable)
        if used[variable] and declared is not None and declared != kind:
            key = "by_batch" if variable == "batch" else "dtypes"
            raise ValueError(
                f"context variable {variable!r} is routed on ({key}) and must be {kind!r}, "
                f"not {declared!r}"
            )
