"""The shape of evidence documents and of their wire form, checked in full before use.

An evidence file or a daemon's answer that lacks a key or has a value of the wrong type is an
:class:`~kernelpolicy.errors.EvidenceError` naming the place (``results[3].status``) and what
was expected, never a ``KeyError`` or ``TypeError`` from deep in the engine.
"""

from __future__ import annotations

from typing import Any, NoReturn

from kernelpolicy.errors import EvidenceError
from kernelpolicy.limits import shown

EVIDENCE_SCHEMA = "kernelpolicy.evidence/v1"
STATUSES = ("passed", "differs", "failed", "skipped")
_SHOWN_FAILURES = 3


def _bad(source: str, where: str, expected: str, value: object, hint: str = "") -> NoReturn:
    found = shown(repr(value)) if not isinstance(value, dict | list) else type(value).__name__
    raise EvidenceError(f"{source}: {where}: expected {expected}, found {found}{hint}")


def _field(item: dict[str, Any], name: str, kind: type, source: str, where: str) -> Any:
    value = item.get(name)
    # bool is an int: a status flag must be a real bool and a count must not be one.
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        _bad(source, f"{where}.{name}", kind.__name__, value, _VERIFY)
    return value


_VERIFY = "; run kernelpolicy verify"


def validate_document(data: Any, key: str, source: str) -> dict[str, Any]:
    """``data`` as a ``kernelpolicy.evidence/v1`` document for ``key``.

    Raises:
        EvidenceError: Anything missing or of the wrong type, naming where.
    """
    if not isinstance(data, dict):
        _bad(source, "document", f"a {EVIDENCE_SCHEMA} object", data, _VERIFY)
    if data.get("schema") != EVIDENCE_SCHEMA:
        _bad(source, "schema", repr(EVIDENCE_SCHEMA), data.get("schema"), _VERIFY)
    if data.get("key") != key:
        _bad(source, "key", f"{key!r} (this platform)", data.get("key"), _VERIFY)
    _field(data, "created", str, source, "document")
    results = _field(data, "results", list, source, "document")
    for index, result in enumerate(results):
        where = f"results[{index}]"
        if not isinstance(result, dict):
            _bad(source, where, "an object", result, _VERIFY)
        _field(result, "feature", str, source, where)
        _field(result, "impl", str, source, where)
        if result.get("status") not in STATUSES:
            _bad(source, f"{where}.status", " or ".join(STATUSES), result.get("status"), _VERIFY)
        for number, check in enumerate(_field(result, "checks", list, source, where)):
            if not isinstance(check, dict):
                _bad(source, f"{where}.checks[{number}]", "an object", check, _VERIFY)
            _field(check, "check", str, source, f"{where}.checks[{number}]")
            _field(check, "passed", bool, source, f"{where}.checks[{number}]")
    return data


Summary = tuple[bool, str, str, tuple[str, ...], tuple[str, ...], bool]


def dtype_results(checks: list[dict[str, Any]]) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    """(dtypes passed, dtypes failed, whether a check naming no dtype failed) of one result.

    A dtype passed when every check naming it passed or only differs by a convention (the rule
    of ``ImplReport.dtypes``; :func:`differences` lists those);
    only the names of :data:`~kernelpolicy.dtypes.DTYPE_NAMES` count, so nothing
    else an evidence file says reaches the engine as a dtype.
    """
    from kernelpolicy.dtypes import DTYPE_NAMES
    from kernelpolicy.evidence.model import check_dtypes

    found: dict[str, bool] = {}
    general_failed = False
    for check in checks:
        named = check_dtypes(check["check"])
        ok = check["passed"] or _differs(check)
        general_failed |= not named and not ok
        for name in named:
            found[name] = found.get(name, True) and ok
    order = [d for d in DTYPE_NAMES if d in found]
    return (
        tuple(d for d in order if found[d]),
        tuple(d for d in order if not found[d]),
        general_failed,
    )


def _differs(check: dict[str, Any]) -> bool:
    """A failed check that only differs by a convention it names (a string)."""
    return not check["passed"] and isinstance(check.get("convention"), str)


def _conventions(checks: list[dict[str, Any]]) -> str:
    return "; ".join(sorted({shown(c["convention"]) for c in checks}))


def differences(checks: list[dict[str, Any]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(dtypes some check of which only differs, the conventions named) of one result."""
    from kernelpolicy.dtypes import DTYPE_NAMES
    from kernelpolicy.evidence.model import check_dtypes

    differing = [c for c in checks if _differs(c)]
    dtypes = {d for c in differing for d in check_dtypes(c["check"])}
    conventions = sorted({shown(c["convention"]) for c in differing})
    return tuple(d for d in DTYPE_NAMES if d in dtypes), tuple(conventions)


def results_summary(document: dict[str, Any]) -> dict[tuple[str, str], Summary]:
    """(feature, impl) -> (passed, created, summary, dtypes passed, dtypes failed, a check
    naming no dtype failed) of a validated document; skips left out."""
    created = shown(document["created"])
    summary: dict[tuple[str, str], Summary] = {}
    for result in document["results"]:
        if result["status"] == "skipped":
            continue
        checks = result["checks"]
        failing = [shown(c["check"]) for c in checks if not c["passed"] and not _differs(c)]
        differing = [c for c in checks if not c["passed"] and _differs(c)]
        text = (
            f"failed: {', '.join(failing[:_SHOWN_FAILURES])}" if failing
            else f"all checks passed; {len(differing)} differ ({_conventions(differing)})"
            if differing else "all checks passed"
        )  # fmt: skip
        # A "passed" status with a failed check is not a pass.
        passed = result["status"] in ("passed", "differs") and not failing
        summary[(result["feature"], result["impl"])] = (
            passed, created, text, *dtype_results(result["checks"])
        )  # fmt: skip
    return summary


_WIRE_ROW = (str, str, bool, str, str, str)
_WIRE_ROW_NAMES = (
    "[feature, impl, passed, created, summary, source] or that and "
    "[dtypes passed, dtypes failed, general failure]"
)


def validate_wire(data: Any, source: str) -> None:
    """Check the form ``evidence_to_json`` writes: {key, problem, entries: [[6 values]...]}.

    Raises:
        EvidenceError: Anything missing or of the wrong type, naming where.
    """
    if not isinstance(data, dict):
        _bad(source, "document", "an object with key, problem and entries", data)
    if not isinstance(data.get("key"), str):
        _bad(source, "key", "a string", data.get("key"))
    if data.get("problem") is not None and not isinstance(data.get("problem"), str):
        _bad(source, "problem", "a string or null", data.get("problem"))
    entries = data.get("entries")
    if not isinstance(entries, list):
        _bad(source, "entries", "a list", entries)
    for index, row in enumerate(entries):
        if not (
            isinstance(row, list)
            and len(row) in (len(_WIRE_ROW), len(_WIRE_ROW) + 3)
            and all(type(value) is kind for value, kind in zip(row, _WIRE_ROW, strict=False))
            and (len(row) == len(_WIRE_ROW) or _wire_dtypes(row[len(_WIRE_ROW) :]))
        ):
            _bad(source, f"entries[{index}]", _WIRE_ROW_NAMES, row)
    data.setdefault("problem", None)


def _wire_dtypes(extra: list[Any]) -> bool:
    """[dtypes passed, dtypes failed, general failure]: two lists of known dtype names and a
    bool (a daemon's evidence, before the engine generates code naming those dtypes)."""
    from kernelpolicy.dtypes import DTYPE_NAMES

    passed, failed, general = extra
    return type(general) is bool and all(
        isinstance(names, list) and all(n in DTYPE_NAMES for n in names)
        for names in (passed, failed)
    )
