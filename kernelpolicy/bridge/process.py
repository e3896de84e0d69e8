"""The environment and command line of the engine that ``kernelpolicy exec`` starts.

Pure functions: what the user set is an input, never overwritten; flags the user already gave
are kept as given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from kernelpolicy.bridge.model import EngineSettings
from kernelpolicy.knobs import CONFIG_FIELDS, UNDERSCORE_OPTIONS
from kernelpolicy.policy.schema.bridge import flag_options


def child_environment(environ: Mapping[str, str], settings: EngineSettings) -> dict[str, str]:
    """``environ`` plus the settings' variables; a variable already set keeps its value."""
    child = dict(environ)
    for key, value in settings.env.items():
        if not child.get(key, "").strip():
            child[key] = value
    return child


def child_command(command: Sequence[str], settings: EngineSettings) -> tuple[list[str], list[str]]:
    """(argv, warnings): ``command`` with the settings' flags appended, except options the
    command already gives, in any spelling the engine reads (kept as given; a different value
    is a warning)."""
    given = given_options(command, settings.engine)
    argv = list(command)
    warnings = []
    for option, values in flag_options(settings.flags):
        if option in given:
            if given[option] != values:
                warnings.append(
                    f"{' '.join((option, *given[option]))} is on the command line and kept; the "
                    f"policy would pass {' '.join((option, *values))}"
                )
            continue
        argv += [option, *values]
    return argv, warnings


def given_options(command: Sequence[str], engine: str) -> dict[str, tuple[str, ...]]:
    """The options ``command`` gives, under the names the policy's flags use: for vLLM,
    ``--attention_backend X`` is ``--attention-backend X``, and a backend given inside
    ``--attention-config`` (``-ac``), whole or as ``.backend``, gives ``--attention-backend``."""
    given: dict[str, tuple[str, ...]] = {}
    words = [_dashed(word) if engine in UNDERSCORE_OPTIONS else word for word in command]
    for option, values in flag_options(words):
        given.setdefault(option, values)
    for option, (config, short, field) in CONFIG_FIELDS.get(engine, {}).items():
        for index, word in enumerate(words):
            name, sep, inline = word.partition("=")
            if name not in (config, short, f"{config}.{field}", f"{short}.{field}"):
                continue
            value = inline if sep else (words[index + 1] if index + 1 < len(words) else "")
            if name.endswith(f".{field}"):
                given.setdefault(option, (value,))
            elif (found := _config_field(value, field)) is not None:
                given.setdefault(option, (found,))
    return given


def _dashed(word: str) -> str:
    """``--a_b.c_d=x`` -> ``--a-b.c_d=x``: the name up to its first "." (vLLM's rule)."""
    if not word.startswith("--"):
        return word
    name, sep, value = word.partition("=")
    head, dot, tail = name[2:].partition(".")
    return f"--{head.replace('_', '-')}{dot}{tail}{sep}{value}"


def _config_field(value: str, field: str) -> str | None:
    """``field`` of a JSON config given on the command line; a config that is not a JSON
    object (the engine refuses it itself) gives nothing."""
    try:
        config = json.loads(value)
    except (ValueError, RecursionError):
        return None
    if not isinstance(config, dict) or field not in config:
        return None
    found = config[field]
    return found if isinstance(found, str) else json.dumps(found)
