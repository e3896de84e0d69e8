"""The environment and command line of the engine that ``kernelpolicy exec`` starts.

Pure functions: what the user set is an input, never overwritten; flags the user already gave
are kept as given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kernelpolicy.bridge.model import EngineSettings
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
    command already gives (kept as given; a different value is a warning)."""
    given = dict(flag_options(command))
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
