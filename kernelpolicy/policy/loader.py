"""Read policy files into a :class:`PolicySet`, or one :class:`PolicyError` listing every mistake.

Files are TOML (tomllib); a directory means its ``*.toml`` files in name order. A feature or gate
may be defined in one file only; ``[[disable]]`` entries may come from any file (an operator's
override file next to the bundled pack).
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kernelpolicy.errors import PolicyError, PolicyIssue
from kernelpolicy.policy.cel import compile_expression
from kernelpolicy.policy.compiled import (
    CompiledDisable,
    CompiledFeature,
    CompiledGate,
    PolicySet,
    Source,
    compile_candidate,
)
from kernelpolicy.policy.locate import locate
from kernelpolicy.policy.names import check_names
from kernelpolicy.policy.schema import Feature, PolicyFile


def expand_policy_paths(paths: Iterable[str | Path]) -> list[str]:
    """Paths with ``+PATH`` entries resolved: any ``+`` adds to the bundled pack.

    ``["+/etc/kp"]`` means the bundled pack, then ``/etc/kp``; without a ``+`` the paths replace
    the pack.
    """
    entries = [str(path) for path in paths]
    if not any(entry.startswith("+") for entry in entries):
        return entries
    from kernelpolicy.settings import bundled_policy_dir

    return [str(bundled_policy_dir()), *(entry.removeprefix("+") for entry in entries)]


def policy_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand directories to their ``*.toml`` files (sorted); keep files as given.

    A ``+PATH`` entry adds to the bundled pack (see :func:`expand_policy_paths`).
    """
    files: list[Path] = []
    for raw in expand_policy_paths(paths):
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.suffix == ".toml" and p.is_file()))
        else:
            files.append(path)
    return files


def read_policy_sources(paths: Iterable[str | Path]) -> list[tuple[str, str]]:
    """(file name, text) of every policy file under ``paths``.

    Raises:
        PolicyError: A file is missing or unreadable, or there is no file at all.
    """
    files = policy_files(paths)
    if not files:
        raise PolicyError([PolicyIssue("<policies>", "no policy files found")])
    issues: list[PolicyIssue] = []
    sources = [(str(path), text) for path in files if (text := _read(path, issues)) is not None]
    if issues:
        raise PolicyError(issues)
    return sources


def load_policies(paths: Iterable[str | Path]) -> PolicySet:
    """Load, validate and compile policy files.

    Raises:
        PolicyError: Every problem found, each with file, line, feature and key where known.
            Nothing is half-loaded.
    """
    return load_policy_sources(read_policy_sources(paths))


def load_policy_sources(sources: Sequence[tuple[str, str]]) -> PolicySet:
    """Load policy documents given as (name, text) pairs, as if read from files of those names.

    The digest depends on the base names and texts only, so a daemon's clients rebuild the same
    PolicySet (and the same fingerprints) from the texts it sends them.
    """
    issues: list[PolicyIssue] = []
    parsed: list[tuple[str, str, PolicyFile]] = []
    digest = hashlib.sha256()
    for name, text in sources:
        digest.update(Path(name).name.encode() + b"\0" + text.encode() + b"\0")
        model = _validate(name, text, issues)
        if model is not None:
            parsed.append((name, text, model))
    if issues:
        raise PolicyError(issues)
    return _assemble(parsed, tuple(name for name, _ in sources), digest.hexdigest()[:16])


def load_policy_text(text: str, name: str = "<string>") -> PolicySet:
    """Load one policy document from a string (tests, and ``check`` on standard input)."""
    return load_policy_sources([(name, text)])


def _read(path: Path, issues: list[PolicyIssue]) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        issues.append(PolicyIssue(str(path), "no such policy file"))
    except (OSError, UnicodeDecodeError) as exc:
        issues.append(
            PolicyIssue(str(path), f"cannot read: {getattr(exc, 'strerror', None) or exc}")
        )
    return None


def _validate(name: str, text: str, issues: list[PolicyIssue]) -> PolicyFile | None:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = _toml_line(str(exc))
        issues.append(PolicyIssue(name, f"not valid TOML: {exc}", line=line))
        return None
    if "schema" not in data:
        issues.append(
            PolicyIssue(name, "missing 'schema = \"kernelpolicy.policy/v1\"' at the top", line=1)
        )
        return None
    try:
        model = PolicyFile.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            issues.append(_issue(name, text, tuple(err["loc"]), err["msg"], err["type"]))
        return None
    before = len(issues)
    _compile_expressions(name, text, model, issues)
    check_names(name, text, model, issues)
    return model if len(issues) == before else None


def _issue(name: str, text: str, loc: tuple[Any, ...], msg: str, kind: str) -> PolicyIssue:
    # pydantic puts union-member names (str, LibraryRequirement) into the path; drop them.
    loc = tuple(p for p in loc if not (isinstance(p, str) and (p[:1].isupper() or p == "str")))
    feature = str(loc[1]) if len(loc) > 1 and loc[0] in {"features", "gates"} else None
    key_parts = loc[2:] if feature else loc
    key = ".".join(str(p) for p in key_parts) or None
    message = msg.removeprefix("Value error, ")
    if kind == "extra_forbidden":
        message = "unknown key (check the spelling; see README 'Policy language')"
    elif kind == "missing":
        message = "required key is missing"
    return PolicyIssue(name, message, line=locate(text, loc), feature=feature, key=key)


def _compile_expressions(
    name: str, text: str, model: PolicyFile, issues: list[PolicyIssue]
) -> None:
    for feature_name, feature in model.features.items():
        for index, candidate in enumerate(feature.candidates):
            if candidate.when is None:
                continue
            loc = ("features", feature_name, "candidates", index, "when")
            try:
                compile_expression(candidate.when, feature.context)
            except ValueError as exc:
                issues.append(
                    PolicyIssue(
                        name, str(exc), locate(text, loc), feature_name, f"candidates.{index}.when"
                    )
                )
    for gate_name, gate in model.gates.items():
        try:
            compile_expression(gate.rule, gate.context)
        except ValueError as exc:
            issues.append(
                PolicyIssue(
                    name, str(exc), locate(text, ("gates", gate_name, "rule")), gate_name, "rule"
                )
            )


def _assemble(
    parsed: Sequence[tuple[str, str, PolicyFile]], files: tuple[str, ...], digest: str
) -> PolicySet:
    features: dict[str, CompiledFeature] = {}
    gates: dict[str, CompiledGate] = {}
    disables: list[CompiledDisable] = []
    issues: list[PolicyIssue] = []
    for name, text, model in parsed:
        for fname, feature in model.features.items():
            line = locate(text, ("features", fname))
            if fname in features:
                issues.append(
                    PolicyIssue(
                        name, f"feature also defined in {features[fname].source}", line, fname
                    )
                )
                continue
            features[fname] = _compile_feature(name, text, fname, feature, line)
        for gname, gate in model.gates.items():
            line = locate(text, ("gates", gname))
            if gname in gates:
                issues.append(
                    PolicyIssue(name, f"gate also defined in {gates[gname].source}", line, gname)
                )
                continue
            gates[gname] = CompiledGate(
                gname, gate, Source(name, line), compile_expression(gate.rule, gate.context)
            )
        disables.extend(
            CompiledDisable(d, Source(name, locate(text, ("disable", i))))
            for i, d in enumerate(model.disable)
        )
    issues.extend(_cross_references(features, gates, disables))
    if issues:
        raise PolicyError(issues)
    return PolicySet(
        features=features,
        gates=gates,
        disables=tuple(disables),
        files=files,
        digest=digest,
        env_names=frozenset(
            s.env for f in features.values() for c in f.candidates for s in c.spec.switches
        ),
        library_names=frozenset(
            lib.name
            for f in features.values()
            for c in f.candidates
            for lib in (*c.libraries, *(i.library for i in c.issues if i.library))
        ),
    )


def _compile_feature(
    name: str, text: str, fname: str, feature: Feature, line: int | None
) -> CompiledFeature:
    candidates = tuple(
        compile_candidate(
            fname,
            cand,
            Source(name, locate(text, ("features", fname, "candidates", i))),
            compile_expression(cand.when, feature.context) if cand.when else None,
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
            known = sorted(features) if feature is None else [c.impl for c in feature.candidates]
            issues.append(
                PolicyIssue(
                    disable.source.file,
                    f"disables {disable.spec.feature}/{disable.spec.impl}, which is not defined "
                    f"(known: {', '.join(known)})",
                    disable.source.line,
                    disable.spec.feature,
                    "disable",
                )
            )
    return issues


def _toml_line(message: str) -> int | None:
    # tomllib: "Expected '=' after a key in a key/value pair (at line 3, column 7)"
    marker = "(at line "
    if marker in message:
        digits = message.split(marker, 1)[1].split(",", 1)[0]
        return int(digits) if digits.isdigit() else None
    return None
