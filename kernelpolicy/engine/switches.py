"""Environment switches and forced implementations, read from the env mapping given to resolve().

Each switch maps its variable's three conditions (unset, true, false) to a state; the states of a
candidate's switches combine: ``off`` beats ``auto``, ``on`` beats ``auto``, and ``on`` together
with ``off`` is a conflict. All switches ``ignore`` means ``auto``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernelpolicy.errors import SettingsError
from kernelpolicy.limits import MAX_ENV_VALUE_CHARS
from kernelpolicy.platform.envvars import carried, over_limit
from kernelpolicy.policy.compiled import PolicySet, switch_variables
from kernelpolicy.settings import ACCEPTED_BOOLEANS, parse_bool

if TYPE_CHECKING:
    from kernelpolicy.policy.schema import Switch

FORCE_PREFIX = "KERNELPOLICY_FORCE_"


def force_variable(feature: str) -> str:
    """``sampler.top_k_top_p`` -> ``KERNELPOLICY_FORCE_SAMPLER_TOP_K_TOP_P``."""
    return FORCE_PREFIX + feature.upper().replace(".", "_").replace("-", "_")


def read_variables(policies: PolicySet) -> frozenset[str]:
    """Every variable a resolution under ``policies`` reads: the switches they name and the
    ``KERNELPOLICY_FORCE_<FEATURE>`` of each feature. Nothing else is captured or carried."""
    return policies.env_names | {force_variable(name) for name in policies.features}


@dataclass(frozen=True)
class SwitchOutcome:
    """The combined state and the words that explain it."""

    state: str  # auto | on | off
    source: str | None  # e.g. "VLLM_USE_FLASHINFER_SAMPLER=1", None when nothing was set
    error: str | None = None
    conflict: bool = False


def over_limit_message(variable: str, value: str, expected: str) -> str | None:
    """The error for a value that was not carried (over ``MAX_ENV_VALUE_CHARS``), else None."""
    length = over_limit(value)
    if length is None:
        return None
    return (
        f"{variable}: a value of {length} characters is over MAX_ENV_VALUE_CHARS "
        f"({MAX_ENV_VALUE_CHARS}) and was not read; expected {expected}"
    )


def switch_value(switch: Switch, env: Mapping[str, str]) -> tuple[str, str | None]:
    """(the variable read, its value in carried form, None where unset or blank): the first of
    the switch's ``env`` and its ``aliases`` that is set."""
    for variable in switch_variables(switch):
        raw = env.get(variable)
        value = None if raw is None else carried(raw)
        if value:
            return variable, value
    return switch.env, None


def evaluate_switches(
    switches: tuple[Switch, ...] | list[Switch], env: Mapping[str, str]
) -> SwitchOutcome:
    """Combine a candidate's switches under ``env``.

    Values are taken in their carried form (kernelpolicy.platform.envvars), so every source
    and error shows at most ``SHOWN_ENV_VALUE_CHARS`` of a value.
    """
    states: list[tuple[str, str]] = []
    for switch in switches:
        variable, value = switch_value(switch, env)
        if not value:
            state, source = switch.unset, f"{' and '.join(switch_variables(switch))} unset"
        else:
            source = f"{variable}={value}"
            too_long = over_limit_message(variable, value, ACCEPTED_BOOLEANS)
            if too_long is not None:
                return SwitchOutcome("off", source, error=too_long)
            try:
                enabled = parse_bool(variable, value)
            except SettingsError as exc:
                return SwitchOutcome("off", source, error=str(exc))
            state = switch.true if enabled else switch.false
        if state != "ignore":
            states.append((state, source))
    kinds = {state for state, _ in states}
    if "on" in kinds and "off" in kinds:
        on = next(s for st, s in states if st == "on")
        off = next(s for st, s in states if st == "off")
        return SwitchOutcome("off", f"{on} and {off}", conflict=True)
    for wanted in ("off", "on"):
        if wanted in kinds:
            return SwitchOutcome(wanted, next(s for st, s in states if st == wanted))
    if states:
        return SwitchOutcome("auto", states[0][1])
    return SwitchOutcome("auto", None)
