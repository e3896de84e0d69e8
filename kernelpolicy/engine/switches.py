"""Environment switches and forced implementations, read from the env mapping given to resolve().

Each switch maps its variable's three conditions (unset, true, false) to a state; the states of a
candidate's switches combine: ``off`` beats ``auto``, ``on`` beats ``auto``, and ``on`` together
with ``off`` is a conflict. All switches ``ignore`` means ``auto``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kernelpolicy.errors import SettingsError
from kernelpolicy.policy.schema import Switch
from kernelpolicy.settings import parse_bool

FORCE_PREFIX = "KERNELPOLICY_FORCE_"


def force_variable(feature: str) -> str:
    """``sampler.top_k_top_p`` -> ``KERNELPOLICY_FORCE_SAMPLER_TOP_K_TOP_P``."""
    return FORCE_PREFIX + feature.upper().replace(".", "_").replace("-", "_")


@dataclass(frozen=True)
class SwitchOutcome:
    """The combined state and the words that explain it."""

    state: str  # auto | on | off
    source: str | None  # e.g. "VLLM_USE_FLASHINFER_SAMPLER=1", None when nothing was set
    error: str | None = None
    conflict: bool = False


def evaluate_switches(
    switches: tuple[Switch, ...] | list[Switch], env: Mapping[str, str]
) -> SwitchOutcome:
    """Combine a candidate's switches under ``env``."""
    states: list[tuple[str, str]] = []
    for switch in switches:
        raw = env.get(switch.env)
        if raw is None or raw.strip() == "":
            state, source = switch.unset, f"{switch.env} unset"
        else:
            try:
                value = parse_bool(switch.env, raw)
            except SettingsError as exc:
                return SwitchOutcome("off", f"{switch.env}={raw}", error=str(exc))
            state = switch.true if value else switch.false
            source = f"{switch.env}={raw}"
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
