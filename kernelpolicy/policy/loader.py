"""Read policy files into a :class:`PolicySet`, or one :class:`PolicyError` listing every mistake.

Files are TOML; a directory means its ``*.toml`` files in name order (see
:mod:`kernelpolicy.policy.files` for trust, size and file-count checks). A feature or gate may be
defined in one file only; ``[[disable]]`` entries may come from any file (an operator's override
file next to the bundled pack).

Every document is parsed with a depth limit (``MAX_NESTING_DEPTH``), every CEL rule is measured
against the CEL limits before the CEL library sees it, and every public entry runs inside the
loader's one error boundary (:mod:`kernelpolicy.policy.load_boundary`): nothing but a
``PolicyError`` (or an ``UntrustedFileError``) leaves it. Locating issues indexes each text once
(:mod:`kernelpolicy.policy.locate`), so loading is linear in the size of the files.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kernelpolicy.errors import PolicyError, PolicyIssue
from kernelpolicy.gcpause import collector_paused
from kernelpolicy.limits import MAX_POLICY_FILE_BYTES, MAX_POLICY_FILES
from kernelpolicy.policy.cel import compile_expression
from kernelpolicy.policy.compiled import (
    CompiledDisable,
    CompiledFeature,
    CompiledGate,
    PolicySet,
    Source,
    compile_candidate,
)
from kernelpolicy.policy.files import expand_policy_paths, policy_files, read_policy_sources
from kernelpolicy.policy.load_boundary import Cursor, boundary
from kernelpolicy.policy.locate import locate
from kernelpolicy.policy.names import check_names
from kernelpolicy.policy.schema import Feature, PolicyFile
from kernelpolicy.policy.schema_messages import plain_loc, schema_errors
from kernelpolicy.safeio import parse_toml

__all__ = [
    "expand_policy_paths",
    "load_policies",
    "load_policy_sources",
    "load_policy_text",
    "policy_files",
    "read_policy_sources",
]

POLICY_LANGUAGE = "docs/policies.md in kernelpolicy's source tree"
"""Where an unknown key's message sends the reader: no path of an installed kernelpolicy (it
has no docs/ and names no documentation URL), so the source tree's, said to be so."""

Programs = dict[tuple[str, ...], Any]
"""Compiled CEL programs of one file: ("features", name, index) or ("gates", name) -> program."""


def load_policies(paths: Iterable[str | Path], *, allow_untrusted: bool = False) -> PolicySet:
    """Load, validate and compile policy files.

    Args:
        paths: Files and directories (a directory means its ``*.toml`` files in name order).
        allow_untrusted: Accept files another user owns or can write (see
            :func:`read_policy_sources`).

    Raises:
        PolicyError: Every problem found, each with file, line, feature and key where known.
            Nothing is half-loaded.
        UntrustedFileError: A policy file or directory is owned or writable by another user.
    """
    return load_policy_sources(read_policy_sources(paths, allow_untrusted=allow_untrusted))


def digest_part(name: str, data: bytes) -> bytes:
    """What one policy file adds to ``PolicySet.digest``: its base name and text (a node that
    keeps its files at other paths has the same digest)."""
    return Path(name).name.encode() + b"\0" + data + b"\0"


def policy_digest(sources: Iterable[tuple[str, str]]) -> str:
    """``PolicySet.digest`` of (name, text) pairs in load order, without loading them (a
    daemon's texts need not load to be told apart)."""
    digest = hashlib.sha256()
    for name, text in sources:
        digest.update(digest_part(name, text.encode()))
    return digest.hexdigest()[:16]


def load_policy_sources(sources: Sequence[tuple[str, str]]) -> PolicySet:
    """Load policy documents given as (name, text) pairs, as if read from files of those names.

    The digest depends on the base names and texts only, so a daemon's clients rebuild the same
    PolicySet (and the same fingerprints) from the texts it sends them.
    """
    # A 10,000-feature file allocates millions of small objects (TOML tables, pydantic models,
    # compiled candidates); the collector's full passes over them cost as much as the parse
    # itself (measured: 2.9 s -> 1.6 s of CPU). Nothing built here needs collecting first.
    with boundary() as cursor, collector_paused():
        if len(sources) > MAX_POLICY_FILES:
            raise PolicyError(
                [
                    PolicyIssue(
                        "<policies>",
                        f"{len(sources)} policy documents, over MAX_POLICY_FILES "
                        f"({MAX_POLICY_FILES})",
                    )
                ]
            )
        issues: list[PolicyIssue] = []
        parsed: list[tuple[str, str, PolicyFile, Programs]] = []
        digest = hashlib.sha256()
        for name, text in sources:
            cursor.at(name)
            data = text.encode()
            digest.update(digest_part(name, data))
            if len(data) > MAX_POLICY_FILE_BYTES:
                issues.append(
                    PolicyIssue(
                        name,
                        f"{len(data)} bytes is over MAX_POLICY_FILE_BYTES "
                        f"({MAX_POLICY_FILE_BYTES} bytes)",
                    )
                )
                continue
            validated = _validate(name, text, issues, cursor)
            if validated is not None:
                parsed.append((name, text, *validated))
        if issues:
            raise PolicyError(issues)
        names = tuple(name for name, _ in sources)
        return _assemble(parsed, names, digest.hexdigest()[:16], cursor)


def load_policy_text(text: str, name: str = "<string>") -> PolicySet:
    """Load one policy document from a string (tests, and ``check`` on standard input)."""
    return load_policy_sources([(name, text)])


def _validate(
    name: str, text: str, issues: list[PolicyIssue], cursor: Cursor
) -> tuple[PolicyFile, Programs] | None:
    try:
        data = parse_toml(text, name, lambda m: PolicyError([PolicyIssue(name, _local(name, m))]))
    except tomllib.TOMLDecodeError as exc:
        line = _toml_line(str(exc))
        issues.append(PolicyIssue(name, f"not valid TOML: {exc}", line=line))
        return None
    except PolicyError as exc:
        issues.extend(exc.issues)
        return None
    if "schema" not in data:
        issues.append(
            PolicyIssue(name, "missing 'schema = \"kernelpolicy.policy/v1\"' at the top", line=1)
        )
        return None
    try:
        model = PolicyFile.model_validate(data)
    except ValidationError as exc:
        errors = schema_errors(exc.errors())  # in the project's words, a union's merged
        found = [_issue(name, text, tuple(e["loc"]), e["msg"], e["type"]) for e in errors]
        issues += _in_line_order(_misspelt_required(found, errors))
        return None
    found = []
    programs = _compile_expressions(name, text, model, found, cursor)
    cursor.at(name)
    check_names(name, text, model, found)
    issues += _in_line_order(found)
    return (model, programs) if not found else None


def _in_line_order(found: list[PolicyIssue]) -> list[PolicyIssue]:
    """One file's issues in the order of its lines (those without a line first, as found)."""
    return sorted(found, key=lambda issue: issue.line or 0)


def _misspelt_required(found: list[PolicyIssue], errors: Sequence[Any]) -> list[PolicyIssue]:
    """Without the "required key is missing" of a key that an unknown key beside it is the
    misspelling of (``descripton`` for ``description``: the key closest to it of those allowed
    there): that one mistake is said once, at the misspelt key, which then says the key is
    required."""
    from kernelpolicy.policy.schema.keys import allowed_keys
    from kernelpolicy.suggest import close_names

    unknown = {
        tuple(e["loc"]): index for index, e in enumerate(errors) if e["type"] == "extra_forbidden"
    }
    dropped = set()
    for index, error in enumerate(errors):
        loc = tuple(error["loc"])
        if error["type"] != "missing" or not loc:
            continue
        for other, at in unknown.items():
            best = close_names(str(other[-1]), allowed_keys(other))[:1]
            if other[:-1] == loc[:-1] and best == [str(loc[-1])]:
                dropped.add(index)
                said = found[at].message.replace(" (the", " (a required key; the", 1)
                found[at] = replace(found[at], message=said)
    return [issue for index, issue in enumerate(found) if index not in dropped]


def _local(name: str, message: str) -> str:
    return message.removeprefix(f"{name}: ")


def _issue(name: str, text: str, loc: tuple[Any, ...], msg: str, kind: str) -> PolicyIssue:
    loc = plain_loc(loc)  # pydantic puts union-member names (str, LibraryRequirement) in it
    feature = str(loc[1]) if len(loc) > 1 and loc[0] in {"features", "gates"} else None
    key_parts = loc[2:] if feature else loc
    key = ".".join(str(p) for p in key_parts) or None
    message = msg
    if kind == "extra_forbidden":
        message = _unknown_key(loc)
    elif kind == "missing":
        message = "required key is missing"
    return PolicyIssue(name, message, line=locate(text, loc), feature=feature, key=key)


def _unknown_key(loc: tuple[Any, ...]) -> str:
    """ "unknown key; did you mean 'x'?", else the keys allowed there (:data:`POLICY_LANGUAGE`)."""
    from kernelpolicy.policy.schema.keys import allowed_keys
    from kernelpolicy.suggest import did_you_mean

    allowed = allowed_keys(loc)
    close = did_you_mean(str(loc[-1]), allowed) if loc else ""
    if close or not allowed:
        return f"unknown key{close} (the policy language: {POLICY_LANGUAGE})"
    return f"unknown key; expected one of: {', '.join(allowed)}"


def _compile_expressions(
    name: str, text: str, model: PolicyFile, issues: list[PolicyIssue], cursor: Cursor
) -> Programs:
    """Compile every CEL expression once; a mistake becomes an issue located at its key."""
    programs: Programs = {}
    expressions: list[tuple[tuple[Any, ...], str, str, str, Mapping[str, str]]] = [
        (("features", feature_name, "candidates", index, "when"), feature_name,
         f"candidates.{index}.when", candidate.when, feature.context)
        for feature_name, feature in model.features.items()
        for index, candidate in enumerate(feature.candidates)
        if candidate.when is not None
    ]  # fmt: skip
    expressions += [
        (("gates", gate_name, "rule"), gate_name, "rule", gate.rule, gate.context)
        for gate_name, gate in model.gates.items()
    ]
    for loc, owner, key, source, context in expressions:
        cursor.at(name, owner, key)
        try:
            programs[tuple(map(str, loc[:-1]))] = compile_expression(source, context)
        except ValueError as exc:
            issues.append(PolicyIssue(name, str(exc), locate(text, loc), owner, key))
    return programs


def _assemble(
    parsed: Sequence[tuple[str, str, PolicyFile, Programs]],
    files: tuple[str, ...],
    digest: str,
    cursor: Cursor,
) -> PolicySet:
    features: dict[str, CompiledFeature] = {}
    gates: dict[str, CompiledGate] = {}
    disables: list[CompiledDisable] = []
    issues: list[PolicyIssue] = []
    for name, text, model, programs in parsed:
        for fname, feature in model.features.items():
            cursor.at(name, fname)
            line = locate(text, ("features", fname))
            if fname in features:
                issues.append(
                    PolicyIssue(
                        name, f"feature also defined in {features[fname].source}", line, fname
                    )
                )
                continue
            features[fname] = _compile_feature(
                name, text, fname, feature, line=line, programs=programs
            )
        for gname, gate in model.gates.items():
            cursor.at(name, gname)
            line = locate(text, ("gates", gname))
            if gname in gates:
                issues.append(
                    PolicyIssue(name, f"gate also defined in {gates[gname].source}", line, gname)
                )
                continue
            gates[gname] = CompiledGate(gname, gate, Source(name, line), programs[("gates", gname)])
        cursor.at(name, None, "disable")
        disables.extend(
            CompiledDisable(d, Source(name, locate(text, ("disable", i))))
            for i, d in enumerate(model.disable)
        )
    cursor.at("<policies>")
    issues.extend(_cross_references(features, gates, disables))
    if issues:
        order = {name: index for index, name in enumerate(files)}
        raise PolicyError(sorted(issues, key=lambda i: (order.get(i.file, -1), i.line or 0)))
    return PolicySet.build(features, gates, tuple(disables), files, digest)


def _compile_feature(
    name: str, text: str, fname: str, feature: Feature, *, line: int | None, programs: Programs
) -> CompiledFeature:
    candidates = tuple(
        compile_candidate(
            fname,
            cand,
            Source(name, locate(text, ("features", fname, "candidates", i))),
            programs[("features", fname, "candidates", str(i))] if cand.when else None,
        )
        for i, cand in enumerate(feature.candidates)
    )
    return CompiledFeature(fname, feature, Source(name, line), candidates)


def _cross_references(
    features: dict[str, CompiledFeature],
    gates: dict[str, CompiledGate],
    disables: list[CompiledDisable],
) -> list[PolicyIssue]:
    issues = []
    for gate in gates.values():
        req = gate.spec.requires
        if req and (
            req.feature not in features or features[req.feature].candidate(req.impl) is None
        ):
            issues.append(
                PolicyIssue(
                    gate.source.file,
                    f"requires {req.feature}/{req.impl}, which no policy defines",
                    gate.source.line,
                    gate.name,
                    "requires",
                )
            )
    for disable in disables:
        feature = features.get(disable.spec.feature)
        if feature is None or feature.candidate(disable.spec.impl) is None:
            issues.append(
                PolicyIssue(
                    disable.source.file,
                    _undefined_disable(disable, features),
                    disable.source.line,
                    disable.spec.feature,
                    "disable",
                )
            )
    return issues


def _undefined_disable(disable: CompiledDisable, features: dict[str, CompiledFeature]) -> str:
    """What a [[disable]] of an implementation no policy defines says; where the set defines no
    feature at all (an override file loaded alone), the file that defines it is missing."""
    name, impl = disable.spec.feature, disable.spec.impl
    feature = features.get(name)
    if feature is None and not features:
        return (
            f"disables {name}/{impl}, but these policy files define no feature; load it with "
            f"the file that defines {name} (both paths, or +DIR to add a directory to the "
            "bundled pack: kernelpolicy check +DIR FILE)"
        )
    known = sorted(features) if feature is None else [c.impl for c in feature.candidates]
    return f"disables {name}/{impl}, which is not defined (known: {', '.join(known)})"


def _toml_line(message: str) -> int | None:
    # tomllib: "Expected '=' after a key in a key/value pair (at line 3, column 7)"
    marker = "(at line "
    if marker in message:
        digits = message.split(marker, 1)[1].split(",", 1)[0]
        return int(digits) if digits.isdigit() else None
    return None
