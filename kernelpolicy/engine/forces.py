"""Forces and overrides checked against the policies before anything is resolved.

The engine reads ``KERNELPOLICY_FORCE_<FEATURE>`` only for the features the policies define, so
a typo (``KERNELPOLICY_FORCE_SAMPLER_GREEDDY``) or an override of a feature that does not exist
would be ignored in silence: the operator believes a kernel is forced and it is not. The front
doors (``kernelpolicy.resolve()`` and the CLI) call :func:`check_forces` to make that an error.
"""

from __future__ import annotations

from collections.abc import Mapping

from kernelpolicy.engine.switches import FORCE_PREFIX, force_variable
from kernelpolicy.errors import SettingsError
from kernelpolicy.limits import shown
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.suggest import close_names, did_you_mean


def check_forces(policies: PolicySet, env: Mapping[str, str], overrides: Mapping[str, str]) -> None:
    """Raise when a force or an override names no feature (or no implementation) of ``policies``.

    Args:
        policies: The policies the answer uses.
        env: The environment the answer uses (``KERNELPOLICY_FORCE_*`` entries are checked;
            empty ones are ignored, as the engine ignores them).
        overrides: ``KERNELPOLICY_OVERRIDES`` (feature -> implementation).

    Raises:
        SettingsError: Naming the variable, what it said and what the policies define.
    """
    variables = {force_variable(name): name for name in policies.features}
    for variable in sorted(env):
        if (
            variable.startswith(FORCE_PREFIX)
            and env[variable].strip()
            and variable not in variables
        ):
            known = ", ".join(f"{v} ({name})" for v, name in sorted(variables.items()))
            raise SettingsError(
                f"{shown(variable)} names no feature of the policies"
                f"{_close_force(variable, variables)}; known: {known}"
            )
    for feature, impl in sorted(overrides.items()):
        compiled = policies.features.get(feature)
        if compiled is None:
            raise SettingsError(
                f"KERNELPOLICY_OVERRIDES names unknown feature {shown(feature)!r}"
                f"{did_you_mean(feature, policies.features)}; the policies define: "
                f"{', '.join(policies.features)}"
            )
        if compiled.candidate(impl) is None:
            names = [c.impl for c in compiled.candidates]
            raise SettingsError(
                f"KERNELPOLICY_OVERRIDES[{feature!r}] = {shown(impl)!r} is not an implementation "
                f"of {feature}{did_you_mean(impl, names)}; expected one of {', '.join(names)}"
            )


def _close_force(variable: str, variables: Mapping[str, str]) -> str:
    """The did-you-mean of a force variable, compared by the part after the common prefix (the
    prefix alone would make every force look close)."""
    tails = {v.removeprefix(FORCE_PREFIX): v for v in variables}
    found = close_names(variable.removeprefix(FORCE_PREFIX), tails)
    if not found:
        return ""
    return "; did you mean " + " or ".join(repr(tails[f]) for f in found) + "?"
