"""Validation of platform snapshot values: every problem of a snapshot collected with where it
is (``devices.0.memory_mib``) and what was expected, before one error is raised; the frozen
value types of :mod:`kernelpolicy.platform.model` are built on these."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from kernelpolicy.encoding import control_character, escaped
from kernelpolicy.limits import MAX_VERSION_CHARS, shown

__all__ = [
    "Check",
    "Extra",
    "PlatformValueError",
    "check_fields",
    "control_problem",
    "got",
    "init_fields",
    "is_int",
    "part",
    "string_map",
    "too_long",
]


class PlatformValueError(ValueError):
    """A value the snapshot contract refuses; ``problems`` are ``(where, what)`` pairs such as
    ``("devices.0.memory_mib", "expected an integer >= 0, got -1")``."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{where or 'value'}: {what}" for where, what in problems))


class Check:
    """Collects every problem of one snapshot (or one part of it) before raising."""

    def __init__(self, where: str = "") -> None:
        self.where = where
        self.problems: list[tuple[str, str]] = []

    def at(self, key: str | int) -> str:
        return f"{self.where}.{key}" if self.where else str(key)

    def fail(self, key: str | int, what: str) -> None:
        self.problems.append((self.at(key), what))

    def raise_any(self) -> None:
        if self.problems:
            raise PlatformValueError(self.problems)


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def got(value: object) -> str:
    return f"got {shown(repr(value), 80)}"


def check_fields(
    check: Check, data: Mapping[str, Any], spec: Mapping[str, tuple[str, bool]]
) -> None:
    """Each ``name: (kind, required)`` of ``spec`` in ``data``: kind is ``str``, ``str?``
    (or None), ``count`` (int >= 0) or ``count?``; a version-like string is also bounded."""
    for name, (kind, required) in spec.items():
        if name not in data:
            if required:
                check.fail(name, "required")
            continue
        value = data[name]
        if kind.endswith("?") and value is None:
            continue
        if kind.startswith("str") and not isinstance(value, str):
            check.fail(name, f"expected a string, {got(value)}")
        elif kind.startswith("count") and not (is_int(value) and value >= 0):
            check.fail(name, f"expected an integer >= 0, {got(value)}")
        elif kind.startswith("version"):
            if not isinstance(value, str):
                check.fail(name, f"expected a version string, {got(value)}")
            elif len(value) > MAX_VERSION_CHARS:
                check.fail(name, too_long(value))
        if isinstance(value, str) and (problem := control_problem(value)):
            check.fail(name, problem)


def control_problem(text: str) -> str | None:
    """Why ``text`` cannot be a platform string (a version, a name), or ``None``: platform
    strings end up in comments, labels and shell output, where a control character (a
    newline) could start a line of its own."""
    char = control_character(text)
    if char is None:
        return None
    return (
        f"holds the control character {char} ({got(text)}); platform strings (versions, "
        "names) must be printable text"
    )


def too_long(value: str) -> str:
    return f"a version of {len(value)} characters is over MAX_VERSION_CHARS ({MAX_VERSION_CHARS})"


class Extra:
    """Unknown keys of a snapshot part: kept, readable as attributes, written back by
    ``to_dict`` (the contract allows extra keys)."""

    extra: Mapping[str, Any]

    def __getattr__(self, name: str) -> Any:
        if name != "extra" and not name.startswith("__"):
            extra = self.__dict__.get("extra") or {}
            if name in extra:
                return extra[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def to_dict(self) -> dict[str, Any]:
        """The fields and the extra keys, JSON-ready (a part of a snapshot)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}  # type: ignore[arg-type]
        out.update(self.extra)
        return out

    def replace(self, **changes: Any) -> Any:
        """A copy with ``changes`` applied, validated like a new value.

        Raises:
            PlatformValueError: A change the contract refuses.
        """
        return type(self)(**{**self.to_dict(), **changes})


def init_fields(
    obj: object,
    cls: type,
    values: Mapping[str, Any],
    spec: Mapping[str, tuple[str, bool]],
    more: Callable[[Check, Mapping[str, Any]], None] | None = None,
) -> None:
    check = Check()
    check_fields(check, values, spec)
    if more is not None:
        more(check, values)
    check.raise_any()
    known = {f.name for f in fields(cls)} - {"extra"}
    for item in fields(cls):
        if item.name == "extra":
            value: Any = {k: v for k, v in values.items() if k not in known}
        elif item.name in values:
            value = values[item.name]
        else:
            value = item.default
        object.__setattr__(obj, item.name, value)


def part(check: Check, key: str, value: Any, cls: type[Any]) -> Any:
    """A nested part (driver, torch, a device) from a mapping, its problems under ``key``."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        check.fail(key, f"expected an object, {got(value)}")
        return None
    try:
        return cls(**value)
    except PlatformValueError as exc:
        check.problems.extend((check.at(f"{key}.{w}" if w else key), m) for w, m in exc.problems)
        return None


def string_map(check: Check, key: str, value: Any, bounded: bool) -> dict[str, str]:
    if not isinstance(value, Mapping):
        check.fail(key, f"expected an object of strings, {got(value)}")
        return {}
    out: dict[str, str] = {}
    for name, text in value.items():
        where = f"{key}.{escaped(shown(str(name)))}"
        if not isinstance(name, str) or not isinstance(text, str):
            check.fail(where, f"expected a string, {got(text)}")
        elif problem := control_problem(name):
            check.fail(where, f"the name {problem}")
        elif bounded and len(text) > MAX_VERSION_CHARS:
            check.fail(where, too_long(text))
        elif bounded and (problem := control_problem(text)):
            check.fail(where, problem)
        else:
            out[name] = text
    return out
