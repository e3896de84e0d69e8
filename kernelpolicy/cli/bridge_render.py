"""What each engine is told, as a section of ``explain`` (text) and keys of its JSON."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernelpolicy.bridge import ENGINE_DISTRIBUTIONS, EngineSettings, Status, engine_settings
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.render import table


def all_engine_settings(
    resolution: Resolution, env: Mapping[str, str]
) -> dict[str, EngineSettings]:
    """Engine name -> its settings, for every engine the policies name (vllm, sglang first)."""
    names = resolution.policies.engine_names
    ordered = [n for n in ENGINE_DISTRIBUTIONS if n in names] + [
        n for n in names if n not in ENGINE_DISTRIBUTIONS
    ]
    return {name: engine_settings(resolution, name, env) for name in ordered}


def engines_section(settings: Mapping[str, EngineSettings], features: Sequence[str]) -> str:
    """A table feature x engine of what each is told, then the engines' errors and the
    warnings about ``features`` (an engine's release note only where it has a row)."""
    if not settings:
        return ""
    quiet = {Status.NOT_FOR_ENGINE, Status.DEFAULT, Status.NOT_APPLICABLE}
    # Rows where no engine is told anything are left out (explain --json has them all).
    shown = [
        f for f in features
        if any(s.decisions[f].status not in quiet for s in settings.values())
    ]  # fmt: skip
    out = [""]
    if shown:
        headers = ["feature"] + [s.label for s in settings.values()]
        rows = [[f, *(s.decisions[f].summary() for s in settings.values())] for f in shown]
        out += ["", "engines: what each is told (kernelpolicy env --engine NAME prints it)"]
        out.append(table(headers, rows, indent=""))
    else:
        out += ["", "engines: nothing to tell for these features (the engines' defaults)"]
    assumed = [s.engine for s in settings.values() if s.version_assumed]
    if shown and assumed:  # one line for what each such header says, not a warning each
        out.append(
            f"  (newest known): {', '.join(assumed)} not installed here, matched as the newest "
            "release kernelpolicy's knob tables know; env and exec take --engine-version"
        )
    for s in settings.values():
        has_rows = any(s.decisions[f].status not in quiet for f in shown)
        noted = has_rows and not s.version_assumed  # else its release note is the line above
        out += [f"  {s.engine}: error: {e}" for e in s.errors]
        out += [f"  {s.engine}: warning: {w}" for w in s.warnings_for(features, rows=noted)]
    return "\n".join(out)


def add_engines_to_document(
    document: dict[str, Any], settings: Mapping[str, EngineSettings]
) -> None:
    """Each decision gains ``engines``: {engine: what it is told}; the document gains
    ``engines``: {engine: {version, env, flags, errors, warnings}}."""
    for feature, decision in document["decisions"].items():
        decision["engines"] = {n: s.decisions[feature].to_dict() for n, s in settings.items()}
    document["engines"] = {
        name: {
            "version": s.version, "env": s.env, "flags": list(s.flags),
            "errors": list(s.errors), "warnings": list(s.warnings),
        }
        for name, s in settings.items()
    }  # fmt: skip
