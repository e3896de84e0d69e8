"""The environment and command line of the engine that ``kernelpolicy exec`` starts.

Pure functions: what the user set is an input, never overwritten; flags the user already gave
are kept as given.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence

from kernelpolicy.bridge.model import EngineSettings
from kernelpolicy.bridge.plugin import merged_names
from kernelpolicy.knobs import CARRIED_TO_WORKERS, CONFIG_FIELDS, UNDERSCORE_OPTIONS, knob_table
from kernelpolicy.policy.schema.bridge import flag_options


def child_environment(environ: Mapping[str, str], settings: EngineSettings) -> dict[str, str]:
    """``environ`` plus the settings' variables; a variable already set keeps its value, except
    the list of variables the engine's workers get (``CARRIED_TO_WORKERS``), to which the
    settings' names are added."""
    child = dict(environ)
    carried = CARRIED_TO_WORKERS.get(settings.engine)
    for key, value in settings.env.items():
        if key == carried:
            names = [name.strip() for name in value.split(",") if name.strip()]
            child[key] = merged_names(child.get(key, ""), names)
        elif not child.get(key, "").strip():
            child[key] = value
    return child


def child_command(command: Sequence[str], settings: EngineSettings) -> tuple[list[str], list[str]]:
    """(argv, warnings): ``command`` with the settings' flags appended, except options the
    command already gives, in any spelling the engine reads (kept as given; a different value
    is a warning)."""
    table = knob_table(settings.engine)
    options = table.options_in(settings.release) if table and settings.release else ()
    given = given_options(command, settings.engine, options)
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


def given_options(
    command: Sequence[str], engine: str, options: Collection[str] = ()
) -> dict[str, tuple[str, ...]]:
    """The options ``command`` gives, as the engine's argparse reads them, under the names the
    policy's flags use: the last of each wins; an unambiguous prefix of one of ``options`` (the
    release's) is that option (argparse's ``allow_abbrev``); for vLLM ``--attention_backend X``
    is ``--attention-backend X``, and a backend given inside ``--attention-config`` (``-ac``),
    whole or as ``.backend``, gives ``--attention-backend``."""
    given: dict[str, tuple[str, ...]] = {}
    words = [_dashed(word) if engine in UNDERSCORE_OPTIONS else word for word in command]
    for option, values in flag_options(words):
        given[_unabbreviated(option, options)] = values
    for option, (config, short, field) in CONFIG_FIELDS.get(engine, {}).items():
        whole: str | None = None  # the last whole config's field (None: it has none)
        dotted: str | None = None  # vLLM merges the dotted ones and applies them last
        for index, word in enumerate(words):
            name, sep, inline = word.partition("=")
            name = _unabbreviated(name, options) if name.startswith("--") else name
            if name not in (config, short, f"{config}.{field}", f"{short}.{field}"):
                continue
            value = inline if sep else (words[index + 1] if index + 1 < len(words) else "")
            if name.endswith(f".{field}"):
                dotted = value
            else:
                whole = _config_field(value, field)
        if (found := dotted if dotted is not None else whole) is not None:
            given[option] = (found,)
    return given


def _unabbreviated(option: str, options: Collection[str]) -> str:
    """``option``, or the one of ``options`` it is an unambiguous prefix of."""
    if not options or option in options:
        return option
    longer = [o for o in options if o.startswith(option)]
    return longer[0] if len(longer) == 1 else option


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
    if not isinstance(config, dict) or config.get(field) is None:  # null: not given
        return None
    found = config[field]
    return found if isinstance(found, str) else json.dumps(found)
