"""Forces and overrides checked against the policies before anything is resolved.

The engine reads ``KERNELPOLICY_FORCE_<FEATURE>`` only for the features the policies define, so
a typo (``KERNELPOLICY_FORCE_SAMPLER_GREEDDY``) or an override of a feature that does not exist
would be ignored in silence: the operator believes a kernel is forced and it is not. A force or
override naming an implementation its feature does not have (``KERNELPOLICY_FORCE_MHC=aitr``) is
the same kind of mistake, whichever kind of model the feature serves. The front doors
(``kernelpolicy.resolve()``, the CLI and the daemon's requests) call :func:`check_forces` to make
each an error of the input (a :class:`SettingsError`), before anything is resolved; a valid
implementation that cannot run here stays a decision's error, which the engine works out.
"""

from __future__ import annotations

from collections.abc import Mapping

from kernelpolicy.engine.switches import FORCE_PREFIX, force_variable, over_limit_message
from kernelpolicy.errors import SettingsError
from kernelpolicy.limits import shown
from kernelpolicy.platform.envvars import carried
from kernelpolicy.policy.compiled import CompiledFeature, PolicySet
from kernelpolicy.suggest import close_names, did_you_mean


def check_forces(policies: PolicySet, env: Mapping[str, str], overrides: Mapping[str, str]) -> None:
    """Raise when a force or an override names no feature of ``policies``, or an implementation
    its feature does not have.

    Args:
        policies: The policies the answer uses.
        env: The environment the answer uses (``KERNELPOLICY_FORCE_*`` entries are checked;
            empty ones are ignored, as the engine ignores them).
        overrides: ``KERNELPOLICY_OVERRIDES`` (feature -> implementation).

    Raises:
        SettingsError: Naming the variable, what it said and what the policies define (for an
            implementation: the feature, its implementations and the closest name).
    """
    variables = {force_variable(name): name for name in policies.features}
    for variable in sorted(env):
        if not variable.startswith(FORCE_PREFIX) or not env[variable].strip():
            continue
        if variable not in variables:
            known = ", ".join(f"{v} ({name})" for v, name in sorted(variables.items()))
            raise SettingsError(
                f"{shown(variable)} names no feature of the policies"
                f"{_close_force(variable, variables)}; known: {known}"
            )
        _check_impl(policies.features[variables[variable]], variable, carried(env[variable]))
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


def _check_impl(feature: CompiledFeature, variable: str, value: str) -> None:
    """Raise unless ``value`` (the force's carried value, as the engine reads it) names one of
    ``feature``'s implementations: the feature, the value, its implementations and the closest."""
    if feature.candidate(value) is not None:
        return
    names = [c.impl for c in feature.candidates]
    expected = f"one of {', '.join(names)}"
    raise SettingsError(
        over_limit_message(variable, value, expected)
        or f"{variable}={value!r} is not an implementation of {feature.name}"
        f"{did_you_mean(value, names)}; expected {expected}"
    )


def _close_force(variable: str, variables: Mapping[str, str]) -> str:
    """The did-you-mean of a force variable, compared by the part after the common prefix (the
    prefix alone would make every force look close)."""
    tails = {v.removeprefix(FORCE_PREFIX): v for v in variables}
    found = close_names(variable.removeprefix(FORCE_PREFIX), tails)
    if not found:
        return ""
    return "; did you mean " + " or ".join(repr(tails[f]) for f in found) + "?"
