"""What ``kernelpolicy exec`` gives its engine's kernelpolicy plugin: the switch that turns it
on, and the inputs ``exec`` resolved with, so that each engine process resolves alike
(:func:`plugin_environment` writes them, :func:`read_plugin_inputs` reads them back in
:mod:`kernelpolicy.vllm_plugin`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from kernelpolicy.errors import SettingsError
from kernelpolicy.knobs import CARRIED_TO_WORKERS, PLUGIN_ALLOWLIST, PLUGIN_FEATURES, PLUGIN_SINCE
from kernelpolicy.limits import MAX_INPUTS_BYTES, MAX_NESTING_DEPTH, shown
from kernelpolicy.safeio import parse_json
from kernelpolicy.settings import switched_on

# The engines with a kernelpolicy plugin; the variable that turns it on, and the one that
# carries the inputs (names other code and the plugin depend on).
PLUGIN_ENGINES = frozenset({"vllm"})
NAME = "kernelpolicy"  # its entry point's name (pyproject.toml, vllm.general_plugins)
ENABLE = "KERNELPOLICY_VLLM_PLUGIN"
INPUTS = "KERNELPOLICY_VLLM_PLUGIN_INPUTS"
_KEPT_PREFIXES = ("KERNELPOLICY_", "VLLM_", "SGLANG_", "SGL_", "HOME", "XDG_")


def plugin_blocked(engine: str, env: Mapping[str, str]) -> str | None:
    """Why kernelpolicy's plugin will not run in ``engine`` started with ``env`` (the operator
    turned it off, or the engine's plugin list leaves it out), or None."""
    if env.get(ENABLE, "").strip() and not switched_on(env, ENABLE):
        return f"{ENABLE} turns it off"
    allowlist = PLUGIN_ALLOWLIST.get(engine)
    if allowlist is not None and allowlist in env:
        value = env[allowlist]
        if NAME not in value.split(","):
            return (
                f"{allowlist}={shown(value)} does not name {NAME} ({engine} loads only the "
                f"plugins it names: add {NAME} to it)"
            )
    return None


def plugin_routes(
    engine: str, env: Mapping[str, str], release: Version | None, feature: str
) -> bool:
    """kernelpolicy's plugin routes ``feature`` inside ``release`` of ``engine`` (the release
    it runs, not the one the rules are matched as: 0.34.0 runs the plugin as released)."""
    since = PLUGIN_SINCE.get(engine)
    return (
        plugin_blocked(engine, env) is None
        and since is not None and release is not None and release >= Version(since)
        and feature in PLUGIN_FEATURES.get(engine, frozenset())
    )  # fmt: skip


def plugin_environment(
    engine: str,
    env: Mapping[str, str],
    fingerprint: str,
    platform: dict[str, Any] | None = None,
    policies: Sequence[Path] | None = None,
) -> dict[str, str]:
    """The variables for ``engine``'s plugin: ``{}`` for an engine without one.

    Args:
        env: The environment the resolution used (before the engine's settings were added):
            all of it where it fits in ``MAX_INPUTS_BYTES``, else the variables kernelpolicy,
            the engines and the cache location read.
        fingerprint: The resolution's; the plugin warns where it reaches another.
        platform: The snapshot ``--platform`` gave (``Platform.to_dict()``), if any; else each
            process probes its machine.
        policies: The policy paths, if given on the command line.
    """
    if engine not in PLUGIN_ENGINES:
        return {}
    inputs = {
        "env": dict(env),
        "fingerprint": fingerprint,
        "platform": platform,
        "policies": [str(p.resolve()) for p in policies] if policies else None,
    }
    text = json.dumps(inputs, sort_keys=True)
    if len(text) > MAX_INPUTS_BYTES:
        inputs["env"] = {k: v for k, v in env.items() if k.startswith(_KEPT_PREFIXES)}
        text = json.dumps(inputs, sort_keys=True)
    return {ENABLE: "1", INPUTS: text}


def carried_to_workers(
    engine: str, told: Mapping[str, str], env: Mapping[str, str], reads: Callable[[str], bool]
) -> dict[str, str]:
    """Where ``told`` turns the plugin on: the engine's variable that names what its workers on
    other nodes get (:data:`~kernelpolicy.knobs.CARRIED_TO_WORKERS`), the operator's list in
    ``env`` with the plugin's variables added; ``{}`` elsewhere, or where the release does not
    read that variable (``reads``: the release's answer for a variable).

    vLLM's Ray actors on other nodes get only vLLM's own variables and a few prefixes
    (``vllm/ray/ray_env.py``), so without this the plugin stays off there.
    """
    variable = CARRIED_TO_WORKERS.get(engine)
    if variable is None or told.get(ENABLE, "").strip() != "1" or not reads(variable):
        return {}
    return {variable: merged_names(env.get(variable, ""), (ENABLE, INPUTS))}


def merged_names(value: str, names: Sequence[str]) -> str:
    """A comma-separated list of names (split as vLLM's ``_parse_csv`` does) with ``names``
    added where missing; ``value`` itself where it names them all."""
    present = [name.strip() for name in value.split(",") if name.strip()]
    missing = [name for name in names if name not in present]
    return ",".join([*present, *missing]) if missing else value


@dataclass(frozen=True)
class PluginInputs:
    """The inputs ``kernelpolicy exec`` resolved with, as its engine's plugin reads them back
    (:func:`read_plugin_inputs`); each None where not given."""

    env: dict[str, str] | None = None
    fingerprint: str | None = None
    platform: dict[str, Any] | None = None
    policies: tuple[str, ...] | None = None


_EXPECTED = (
    "expected the JSON object kernelpolicy exec writes: env (an object of strings), "
    "fingerprint (a string), platform (an object: a snapshot), policies (a list of strings), "
    "each may be null"
)


def _failure(message: str) -> SettingsError:
    return SettingsError(f"{message}; {_EXPECTED}")


def read_plugin_inputs(text: str) -> PluginInputs:
    """``KERNELPOLICY_VLLM_PLUGIN_INPUTS`` as :func:`plugin_environment` writes it: at most
    ``MAX_INPUTS_BYTES``, parsed with :func:`kernelpolicy.safeio.parse_json` (strict, nested at
    most one level more than a snapshot may be), each key checked. Empty (unset): no inputs,
    each process resolves with its own environment and probe.

    Raises:
        SettingsError: Naming the variable, what is wrong (a key, its JSON type) and what was
            expected.
    """
    if not text.strip():
        return PluginInputs()
    if len(text) > MAX_INPUTS_BYTES:
        raise _failure(
            f"{INPUTS}: {len(text):,} characters is over MAX_INPUTS_BYTES ({MAX_INPUTS_BYTES:,})"
        )
    data = parse_json(text, INPUTS, _failure, limit=MAX_NESTING_DEPTH + 1)
    if not isinstance(data, dict):
        raise _failure(f"{INPUTS}: a JSON {_json_type(data)}")
    unknown = [key for key in data if key not in _KINDS]
    if unknown:
        raise _failure(f"{INPUTS}: unknown key {shown(unknown[0], 80)!r}")
    for key, (kind, what) in _KINDS.items():
        _check(key, data.get(key), kind, what)
    policies = data.get("policies")
    return PluginInputs(
        env=data.get("env"),
        fingerprint=data.get("fingerprint"),
        platform=data.get("platform"),
        policies=None if policies is None else tuple(policies),
    )


_KINDS: dict[str, tuple[type, str]] = {
    "env": (dict, "an object"),
    "fingerprint": (str, "a string"),
    "platform": (dict, "an object"),
    "policies": (list, "an array"),
}
"""Each key of the inputs: the type of its value (null aside), in words; the items of ``env``
and ``policies`` are strings."""


def _check(key: str, value: Any, kind: type, what: str) -> None:
    """Raise where ``value`` (of ``key``) is not null and not of ``kind``, or where an item of
    ``env`` or ``policies`` is not a string, naming it."""
    if value is None:
        return
    if not isinstance(value, kind):
        raise _failure(f"{INPUTS}: {key} is a JSON {_json_type(value)}, not {what}")
    items: list[tuple[str, Any]] = []
    if isinstance(value, dict) and key == "env":
        items = [(repr(shown(str(name), 80)), item) for name, item in value.items()]
    elif isinstance(value, list):
        items = [(str(index), item) for index, item in enumerate(value)]
    for where, item in items:
        if not isinstance(item, str):
            raise _failure(f"{INPUTS}: {key}[{where}] is a JSON {_json_type(item)}, not a string")


def _json_type(value: Any) -> str:
    """``value``'s type as JSON names it."""
    names = {dict: "object", list: "array", bool: "boolean", str: "string", int: "number"}
    return "null" if value is None else names.get(type(value), "number")
