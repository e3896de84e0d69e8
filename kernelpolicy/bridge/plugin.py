"""What ``kernelpolicy exec`` gives its engine's kernelpolicy plugin: the switch that turns it
on, and the inputs ``exec`` resolved with, so that each engine process resolves alike
(:mod:`kernelpolicy.vllm_plugin` reads them)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# The engines with a kernelpolicy plugin; the variable that turns it on, and the one that
# carries the inputs (names other code and the plugin depend on).
PLUGIN_ENGINES = frozenset({"vllm"})
NAME = "kernelpolicy"  # its entry point's name (pyproject.toml, vllm.general_plugins)
ENABLE = "KERNELPOLICY_VLLM_PLUGIN"
INPUTS = "KERNELPOLICY_VLLM_PLUGIN_INPUTS"
MAX_INPUTS_BYTES = 256 * 1024
_KEPT_PREFIXES = ("KERNELPOLICY_", "VLLM_", "SGLANG_", "SGL_", "HOME", "XDG_")


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
