"""Pydantic's validation errors of a policy document, said in the project's voice.

pydantic words a mistake from the model's side ("Input should be a valid list", "Input should
be 'kernelpolicy.policy/v1'") and leaves out the value it found. Each error here says what was
expected, in the policy language's words (a list of candidate tables, a table, true or false),
and what was found (``got the integer 3``, ``"kernelpolicy.policy/v9" is not a known schema``).
A value that fits no member of a union (a library given as a version range or a table) is one
mistake, not one per member. The loader (:mod:`kernelpolicy.policy.loader`) locates each.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kernelpolicy.limits import shown
from kernelpolicy.policy.schema.model import POLICY_SCHEMA

__all__ = ["plain_loc", "schema_errors"]

Error = Mapping[str, Any]
"""One pydantic error as ``ValidationError.errors()`` gives it: type, loc, msg, input, ctx."""

_SHOWN_CHARS = 80
_MERGED = "kernelpolicy_expected"  # the key a merged union error carries its expectations in

# What a key holds, where pydantic only says "a valid list" / "a valid dictionary".
_LISTS = {
    "candidates": "a list of candidate tables",
    "disable": "a list of [[disable]] tables",
    "arch": 'a list of architecture names such as ["sm_90"]',
    "exclude_arch": 'a list of architecture names such as ["sm_90"]',
    "switches": "a list of switch tables",
    "known_issues": "a list of known-issue tables",
    "workarounds": "a list of workaround tables",
    "by_batch": "a list of batch-route tables",
    "dtypes": 'a list of dtype names such as ["bfloat16"]',
}
_TABLES = {
    "features": "a table of features ([features.NAME])",
    "gates": "a table of gates ([gates.NAME])",
    "libraries": 'a table of distributions such as { "flashinfer-python" = ">=0.2" }',
    "context": 'a table of call-context variables such as { vocab_size = "int" }',
    "engines": "a table of engines such as { vllm = [...] }",
}
_MODELS = {
    "Candidate": "a candidate table",
    "Feature": "a feature table",
    "Gate": "a gate table",
    "Disable": "a [[disable]] table",
    "Rollout": "a table such as { percent = 5 }",
    "HaltOn": "a table such as { guard_trips = 3 }",
    "LibraryRequirement": 'a table such as { version = ">=0.2", compare = "base" }',
}
_SCALARS = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
}
_BOUNDS = {
    "greater_than_equal": ("ge", "at least"),
    "greater_than": ("gt", "more than"),
    "less_than_equal": ("le", "at most"),
    "less_than": ("lt", "less than"),
}


def plain_loc(loc: Sequence[Any]) -> tuple[Any, ...]:
    """``loc`` without the names pydantic puts in it for a union's members (``str``,
    ``LibraryRequirement``): the path of keys as the file spells it."""
    return tuple(p for p in loc if not _is_member(p))


def _is_member(part: Any) -> bool:
    """Whether a ``loc`` part is the name pydantic gives a union's member (``str``, a model's
    class name such as ``LibraryRequirement``), not a key of the file."""
    return isinstance(part, str) and (part[:1].isupper() or part == "str")


def _described(value: Any) -> str:
    """A value found in a file, as a message names it: ``the integer 3``, ``the string "x"``,
    ``a table``, ``an empty list``."""
    for kind, say in _DESCRIPTIONS:
        if isinstance(value, kind):
            return say(value)
    return f"a value of type {type(value).__name__}"


def _items(value: list[Any]) -> str:
    return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}" if value else (
        "an empty list"
    )  # fmt: skip


# In order: bool before int (a bool is an int), datetime before date (a datetime is a date).
_DESCRIPTIONS: tuple[tuple[type | tuple[type, ...], Callable[[Any], str]], ...] = (
    (bool, lambda v: f"the boolean {str(v).lower()}"),
    (int, lambda v: f"the integer {shown(str(v), _SHOWN_CHARS)}"),
    (float, lambda v: f"the number {v}"),
    (str, lambda v: f"the string {_quoted(v)}"),
    (list, _items),
    (Mapping, lambda v: "a table" if v else "an empty table"),
    (datetime.datetime, lambda v: f"the date-time {v.isoformat()}"),
    (datetime.date, lambda v: f"the date {v.isoformat()}"),
    (datetime.time, lambda v: f"the time {v.isoformat()}"),
)


def schema_errors(errors: Sequence[Error]) -> list[dict[str, Any]]:
    """``errors`` with each ``msg`` in the project's voice, and a union's members that all
    failed at the value itself made one error ("expected a string or a table, got ...").
    A member that failed inside the value (a table with a wrong key) was the one meant: the
    others' errors at the value are dropped. Unknown and missing keys pass unchanged (the
    loader words them)."""
    kept = _unions_merged(errors)
    return [{**error, "msg": message(error)} for error in kept]


def message(error: Error) -> str:
    """One error's message: what was expected, and what was found."""
    kind, loc, value = error["type"], plain_loc(error["loc"]), error.get("input")
    ctx = error.get("ctx") or {}
    if _MERGED in error:  # a union's members: each one's expectation
        return f"expected {error[_MERGED]}, got {_described(value)}"
    if kind == "literal_error":
        return _literal(loc, value, ctx)
    if kind in ("too_short", "too_long"):
        return _length(kind, ctx, value)
    if kind in _BOUNDS:
        name, words = _BOUNDS[kind]
        return f"expected {words} {ctx.get(name)}, got {_described(value)}"
    expected = _expected(error)
    if expected is not None:
        return f"expected {expected}, got {_described(value)}"
    return str(error.get("msg", "")).removeprefix("Value error, ")


def _literal(loc: tuple[Any, ...], value: Any, ctx: Mapping[str, Any]) -> str:
    """A value that is none of those allowed: the schema line names the one schema known."""
    found = _quoted(value) if isinstance(value, str) else _described(value)
    if loc == ("schema",):
        return f'{found} is not a known schema; expected "{POLICY_SCHEMA}"'
    return f"expected {_double_quoted(str(ctx.get('expected', '')))}, got {found}"


def _expected(error: Error) -> str | None:
    """What a type error expected, in the policy language's words (None: not a type error)."""
    kind, loc = error["type"], plain_loc(error["loc"])
    key = next((p for p in reversed(loc) if isinstance(p, str)), "")
    if kind == "list_type":
        if len(loc) >= 2 and loc[-2] == "engines":
            return "a list of engine rule tables"
        return _LISTS.get(key, "a list") if loc and loc[-1] == key else "a list"
    if kind == "dict_type":
        return _TABLES.get(key, "a table") if loc and loc[-1] == key else "a table"
    if kind in ("model_type", "model_attributes_type"):
        return _MODELS.get(str((error.get("ctx") or {}).get("class_name", "")), "a table")
    return _SCALARS.get(kind)


def _length(kind: str, ctx: Mapping[str, Any], value: Any) -> str:
    bound = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
    words = "at least" if kind == "too_short" else "at most"
    unit = "item" if ctx.get("field_type") == "List" else "entry"
    unit = unit if bound == 1 else ("items" if unit == "item" else "entries")
    return f"expected {words} {bound} {unit}, got {_described(value)}"


def _unions_merged(errors: Sequence[Error]) -> list[Error]:
    """Errors with those of one union's members (same place, told apart by the member's name
    in ``loc``) merged or dropped as :func:`schema_errors` says."""
    members: dict[tuple[Any, ...], list[int]] = {}
    for index, error in enumerate(errors):
        loc = tuple(error["loc"])
        tag = _member_at(loc)
        if tag is not None:
            members.setdefault(loc[:tag], []).append(index)
    drop: set[int] = set()
    merged: dict[int, Error] = {}
    for prefix, indices in members.items():
        at_value = [i for i in indices if len(errors[i]["loc"]) == len(prefix) + 1]
        typed = [i for i in at_value if _expected(errors[i]) is not None]
        if len(typed) < len(indices):  # a member failed inside the value: that one was meant
            drop.update(typed)
            continue
        expectations = list(dict.fromkeys(str(_expected(errors[i])) for i in typed))
        merged[typed[0]] = {**errors[typed[0]], _MERGED: " or ".join(expectations)}
        drop.update(typed[1:])
    return [merged.get(i, e) for i, e in enumerate(errors) if i not in drop]


def _member_at(loc: tuple[Any, ...]) -> int | None:
    """Where a union member's name is in ``loc`` (the last one), if any."""
    return next((i for i in range(len(loc) - 1, -1, -1) if _is_member(loc[i])), None)


def _quoted(value: str) -> str:
    """A string as TOML writes it (double quotes), cut to a readable length."""
    return json.dumps(shown(value, _SHOWN_CHARS), ensure_ascii=False)


def _double_quoted(expected: str) -> str:
    """pydantic's ``'a', 'b' or 'c'`` as TOML spells the values: ``"a", "b" or "c"``."""
    return re.sub(r"'([^']*)'", r'"\1"', expected)
