"""What the decisions tell one engine, merged: into one environment and one flag list, and with
the operator's own variables (kept, never overwritten)."""

from __future__ import annotations

from collections.abc import Mapping

from kernelpolicy.bridge.model import Told
from kernelpolicy.limits import shown
from kernelpolicy.policy.schema.bridge import flag_options

__all__ = ["kept_variables", "merged"]


def kept_variables(
    engine: str,
    env: Mapping[str, str],
    merged_env: Mapping[str, str],
    carried: Mapping[str, str],
    warnings: list[str],
) -> dict[str, str]:
    """The operator's variables that the policy would set otherwise, each kept with a warning
    (a list ``carried`` extends is not overwritten)."""
    kept = {
        k: env[k]
        for k, v in merged_env.items()
        if env.get(k, "").strip() and env[k] != v and k not in carried
    }
    for key, value in kept.items():
        warnings.append(
            f"{key}={shown(value)} is set in the environment and kept (never overwritten); the "
            "policy "
            f"would set {key}={merged_env[key]}, a value {engine} is known to accept"
        )
    return kept


def merged(told: Mapping[str, Told], errors: list[str]) -> tuple[dict[str, str], list[str]]:
    """One environment and one flag list; two decisions disagreeing is an error."""
    env: dict[str, tuple[str, str]] = {}
    options: dict[str, tuple[tuple[str, ...], str]] = {}
    flags: list[str] = []
    for name, item in told.items():
        for key, value in item.env:
            if key in env and env[key][0] != value:
                errors.append(
                    f"{name}: needs {key}={value}, but {env[key][1]} needs {key}={env[key][0]}"
                )
                continue
            env.setdefault(key, (value, name))
        for option, values in flag_options(item.flags):
            if option in options:
                if options[option][0] != values:
                    errors.append(
                        f"{name}: needs {' '.join((option, *values))}, but {options[option][1]} "
                        f"needs {' '.join((option, *options[option][0]))}"
                    )
                continue
            options[option] = (values, name)
            flags += [option, *values]
    return {k: v for k, (v, _) in env.items()}, flags
