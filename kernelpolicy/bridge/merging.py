"""What the decisions tell one engine, merged: into one environment and one flag list, and with
the operator's own variables (kept, never overwritten)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kernelpolicy.bridge.model import Status, Told
from kernelpolicy.knobs import KnobTable, knob_table
from kernelpolicy.limits import shown
from kernelpolicy.policy.compiled import CompiledCandidate, CompiledFeature
from kernelpolicy.policy.schema.bridge import flag_options

__all__ = ["kept_variables", "merged", "overriding"]

# A decision the engine is told about (or runs by default) with an implementation.
_TOLD = frozenset({Status.TOLD, Status.PLUGIN, Status.DEFAULT, Status.INEXPRESSIBLE})


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


def overriding(
    engine: str,
    env: Mapping[str, str],
    told: Mapping[str, Told],
    features: Mapping[str, CompiledFeature],
    *,
    sent: Mapping[str, str],
    reads: Callable[[str], bool],
    version: object,
) -> list[tuple[str, str]]:
    """(feature, warning) for each of the operator's variables that names an implementation
    (one the engine reads by an enum: ``VLLM_ATTENTION_BACKEND``), that some rule of a told
    feature sets, that this release reads (``reads``) and kernelpolicy does not send here, and
    whose value none of the chosen implementation's rules name: the engine (release
    ``version``) runs what it names, not the choice. vLLM <= 0.14.1 reads
    VLLM_ATTENTION_BACKEND, and 0.13.0-0.14.1 set the backend from it over --attention-backend
    (config/attention.py AttentionConfig.__post_init__). Kept, never overwritten, as every
    variable of the operator's is; a value the engine refuses is the engine's to say."""
    table = knob_table(engine)
    if table is None:
        return []
    found = []
    for name, item in told.items():
        feature = features[name]
        if item.impl is None or item.status not in _TOLD:
            continue
        rules = [*feature.engines.get(engine, ())]
        rules += [r for c in feature.candidates for r in c.engines.get(engine, ())]
        named = sorted({k for r in rules for k in r.spec.env if table.enum_for(k)})
        for variable in named:
            value = env.get(variable, "").strip()
            if not value or variable in sent or not reads(variable):
                continue
            names = _names(feature.candidate(item.impl), engine, variable, table)
            if not names or value.upper() in names:
                continue
            flags = [" ".join((o, *v)) for o, v in flag_options(item.flags) if table.enum_for(o)]
            over = f" (over the {flags[0]} kernelpolicy sends)" if flags else ""
            found.append((name, (
                f"{name}: {variable}={shown(value)} is set, and {engine} {version} reads it: "
                f"it runs the backend that names{over}, not {item.impl}, kernelpolicy's "
                f"choice; unset it, or set {variable}={' or '.join(sorted(names))}, to run "
                f"{item.impl}"
            )))  # fmt: skip
    return found


def _names(
    candidate: CompiledCandidate | None, engine: str, variable: str, table: KnobTable
) -> set[str]:
    """The names the candidate's rules for ``engine`` give the enum that reads ``variable``:
    as that variable's value or as the value of an option read by the same enum."""
    enum = table.enum_for(variable)
    names: set[str] = set()
    for rule in candidate.engines.get(engine, ()) if candidate is not None else ():
        if variable in rule.spec.env:
            names.add(rule.spec.env[variable].upper())
        for option, values in flag_options(rule.spec.flags):
            if values and table.enum_for(option) == enum:
                names.add(values[0].upper())
    return names
