"""Validated policy elements as plain values, for the compiled-pack cache.

The schema (:mod:`kernelpolicy.policy.schema`) validates policy files with pydantic; the engine
only reads the validated values. A :class:`SpecRecord` carries the same fields, read the same
way (``candidate.impl``, ``candidate.known_issues[0].action``), without pydantic: a worker that
finds its pack in the cache never imports it (about 60 ms of a cold start).

:func:`encode` turns a validated model into JSON-ready values with every model, mapping and
list tagged, so that :func:`decode` rebuilds exactly the same shape; nothing is guessed from
the keys a user wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SpecRecord", "candidate_unconditional", "decode", "encode"]


def candidate_unconditional(spec: Any) -> bool:
    """True when nothing about the platform, environment or call can reject the candidate."""
    return not any(
        (
            spec.vendor, spec.arch, spec.exclude_arch, spec.capability,
            spec.min_compute_units, spec.driver, spec.cuda, spec.rocm, spec.torch,
            spec.libraries, spec.switches, spec.when, spec.workarounds, spec.verified,
            spec.rollout, spec.halt_on,
            [k for k in spec.known_issues if k.action == "disable"],
        )
    )  # fmt: skip


class SpecRecord:
    """One validated policy element (a ``Candidate``, a ``Switch``, ...): its fields as
    read-only attributes, named as the schema names them."""

    __slots__ = ("_kind", "_values")

    def __init__(self, kind: str, values: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"{self._kind} has no field {name!r}") from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{self._kind} is read-only")

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SpecRecord)
            and self._kind == other._kind
            and self._values == other._values
        )

    __hash__ = None  # type: ignore[assignment]  # like the models: fields hold lists

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"{self._kind}({fields})"

    @property
    def unconditional(self) -> bool:
        """See :func:`candidate_unconditional` (meaningful for candidates)."""
        return candidate_unconditional(self)


def encode(value: Any) -> Any:
    """A validated model (or any value inside one) as tagged JSON values:
    ``{"m": kind, "f": fields}``, ``{"d": mapping}``, ``{"l": items}``, or a scalar."""
    fields = getattr(type(value), "model_fields", None)
    if fields is not None:
        return {"m": type(value).__name__, "f": {n: encode(getattr(value, n)) for n in fields}}
    if isinstance(value, SpecRecord):
        return {"m": value._kind, "f": {n: encode(v) for n, v in value._values.items()}}
    if isinstance(value, Mapping):
        return {"d": {str(k): encode(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"l": [encode(v) for v in value]}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot encode a {type(value).__name__} in a policy record")


def decode(value: Any) -> Any:
    """The inverse of :func:`encode`: models become :class:`SpecRecord`, lists stay lists.

    Raises:
        ValueError: ``value`` is not something :func:`encode` writes.
    """
    if isinstance(value, dict):
        if len(value) == 2 and isinstance(value.get("m"), str) and isinstance(value.get("f"), dict):
            return SpecRecord(value["m"], {k: decode(v) for k, v in value["f"].items()})
        if len(value) == 1 and isinstance(value.get("d"), dict):
            return {k: decode(v) for k, v in value["d"].items()}
        if len(value) == 1 and isinstance(value.get("l"), list):
            return [decode(v) for v in value["l"]]
        raise ValueError(f"not an encoded policy value: keys {sorted(value)[:4]}")
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise ValueError(f"not an encoded policy value: {type(value).__name__}")
