"""The keys a policy file may use at a place, for the message about an unknown one."""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from kernelpolicy.policy.schema.model import PolicyFile


def allowed_keys(loc: Sequence[Any]) -> tuple[str, ...]:
    """The keys of the table that holds ``loc[-1]`` (a pydantic error location), as a policy
    file spells them; empty where the place is not a table of the schema."""
    current: Any = PolicyFile
    parts = list(loc[:-1])
    while parts:
        model = _model(current)
        if model is None:
            return ()
        part = parts.pop(0)
        field = next(
            (f for n, f in model.model_fields.items() if part in (n, f.alias)), None
        )  # fmt: skip
        if field is None:
            return ()
        current = field.annotation
        while typing.get_origin(_unwrapped(current)) in (list, dict) and parts:
            current = typing.get_args(_unwrapped(current))[-1]  # the item or the value
            parts.pop(0)  # its index or key
    model = _model(current)
    if model is None:
        return ()
    return tuple(f.alias or n for n, f in model.model_fields.items())


def _unwrapped(annotation: Any) -> Any:
    """``X | None`` -> ``X``; a union of several members: the one model among them, if any."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        models = [a for a in members if _model(a) is not None]
        if len(members) == 1:
            return members[0]
        return models[0] if len(models) == 1 else annotation
    return annotation


def _model(annotation: Any) -> type[BaseModel] | None:
    candidate = _unwrapped(annotation)
    if isinstance(candidate, type) and issubclass(candidate, BaseModel):
        return candidate
    return None
