"""What each release of an inference engine reads: its variables, options and selection facts.

The tables (``vllm.json``, ``sglang.json`` beside this module) are made by
``scripts/gen_engine_tables.py`` from the releases' own wheels: for every release, each
``VLLM_*``/``SGLANG_*`` variable it defines, a file that reads it and what its own parser makes
of "", "0" to "4", "true", "false" and "x"; each command-line option of its real argparse with its
choices; the attention-backend enum; and the facts the bundled pack's rules depend on (which
switch gates a kernel), each with its file. Consecutive releases that agree share one span.

``kernelpolicy check`` proves every bridge rule against them (:mod:`kernelpolicy.check.
bridge_proof`); the bridge matches rules as for the newest known release when no engine is
installed, and warns about an operator's variables that the target release does not read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from packaging.version import Version

__all__ = ["EnvKnob", "KnobTable", "knob_table", "shipped"]

SCHEMA = "kernelpolicy.engine-knobs/v1"
# Engine -> its variables' prefixes (the operator's variables checked against the tables).
PREFIXES: dict[str, tuple[str, ...]] = {"vllm": ("VLLM_",), "sglang": ("SGLANG_", "SGL_")}
# Engines with a kernelpolicy plugin (kernelpolicy/vllm_plugin.py), the first release it is
# tested with (tests/test_vllm_e2e.py runs vLLM's CPU build 0.32.0), and the features it
# routes per call inside the engine whenever ``kernelpolicy exec`` turns it on.
PLUGIN_SINCE: dict[str, str] = {"vllm": "0.32.0"}
PLUGIN_FEATURES: dict[str, frozenset[str]] = {
    "vllm": frozenset({"sampler.top_k_top_p", "sampler.greedy"}),
}
# A model runner that samples without the hooks kernelpolicy's plugin routes for V1, and the
# value of its variable that turns it off: vLLM's Model Runner V2, its default on GPUs where
# Triton runs (vllm/config/vllm.py use_v2_model_runner, 0.28.0-0.33.0), samples in
# v1/worker/gpu/sample/sampler.py without TopKTopPSampler (gpu/model_runner.py: "V2 bypasses
# TopKTopPSampler", 0.32.0). The plugin routes V2's Sampler._sample_random too, in the releases
# of PLUGIN_RUNNER_V2 (read from their code: 0.32.0, 0.33.0; kernelpolicy/vllm_sampling.py);
# env and exec warn for a release outside them, where vLLM keeps V2's sampler its own.
PLUGIN_BYPASS: dict[str, tuple[str, str]] = {"vllm": ("VLLM_USE_V2_MODEL_RUNNER", "0")}
PLUGIN_RUNNER_V2: dict[str, str] = {"vllm": ">=0.32.0,<0.34"}
# The variable that, when set, lists the only plugins the engine loads (split on ",": unset
# loads all; vllm/envs.py VLLM_PLUGINS, vllm/plugins/__init__.py load_plugins_by_group, 0.24.0).
PLUGIN_ALLOWLIST: dict[str, str] = {"vllm": "VLLM_PLUGINS"}


def shipped(version: Version) -> Version:
    """The release whose code ``version`` ships: a pre-release or a dev build of X is X
    (``0.32.0rc1``, a nightly ``0.11.1.dev123+g1a2b``: 0.32.0, 0.11.1), a local build of X is
    X (``0.33.0+rocm711``), a post release stays itself (``0.8.5.post1``).

    PEP 440 orders ``0.32.0rc1`` before 0.32.0, so ``>=0.32`` would leave it out; the engines
    read their dependencies' builds as the release they precede (vLLM 0.33.0
    ``is_torch_equal_or_newer("2.11.0.dev")``, utils/torch_utils.py:933; SGLang 0.5.23
    ``Version(Version(triton.__version__).base_version) >= Version("3.5.0")``,
    layers/attention/dsa/utils.py:66), and an rc is cut from the release's own branch.
    """
    text = ".".join(str(part) for part in version.release)
    if version.post is not None:
        text += f".post{version.post}"
    return Version(f"{version.epoch}!{text}" if version.epoch else text)


def runner_v2_routed(engine: str, release: str | Version | None) -> bool:
    """Whether kernelpolicy's plugin routes ``engine``'s Model Runner V2 sampler in ``release``
    (``PLUGIN_RUNNER_V2``; a pre-release or dev build as the release it precedes,
    :func:`shipped`; an unreadable release: no)."""
    from packaging.version import InvalidVersion

    from kernelpolicy.versions import LazySpecifierSet

    spec = PLUGIN_RUNNER_V2.get(engine)
    if spec is None or not release:
        return False
    try:
        ships = shipped(release if isinstance(release, Version) else Version(release))
    except InvalidVersion:  # an unreadable release (a local build's odd string): not one we read
        return False
    return bool(LazySpecifierSet(spec).contains(ships, prereleases=True))


# The variable that lists, beside the engine's own prefixes, the variables its workers on other
# nodes are given; kernelpolicy adds the plugin's to the operator's list rather than setting it:
# vLLM's Ray executor copies to its actors only vLLM's registered variables, those with a listed
# prefix (VLLM_, NCCL_, HF_, ...) and the names this lists (vllm/ray/ray_env.py
# get_env_vars_to_copy, 0.33.0 :36-48, :81-96; the tables say which releases read it).
CARRIED_TO_WORKERS: dict[str, str] = {"vllm": "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY"}
# How an engine's parser spells an option, for telling whether a command line already gives
# one: vLLM reads ``--a_b`` as ``--a-b`` (the name up to its first "."; FlexibleArgumentParser,
# vllm/utils/argparse_utils.py, 0.18.1-0.33.0), and takes some options as a field of a JSON
# config option too (``--attention-config '{"backend": ...}'``, ``-ac.backend=...``), which it
# refuses beside the option itself ("attention_backend and attention_config.backend are
# mutually exclusive", vllm/engine/arg_utils.py, 0.18.1-0.33.0).
UNDERSCORE_OPTIONS: frozenset[str] = frozenset({"vllm"})
CONFIG_FIELDS: dict[str, dict[str, tuple[str, str, str]]] = {
    "vllm": {"--attention-backend": ("--attention-config", "-ac", "backend")},
}
# Values read by an enum rather than by the variable's parser or the option's choices.
ENUM_VALUED: dict[str, dict[str, str]] = {
    "vllm": {
        "VLLM_ATTENTION_BACKEND": "attention_backend",
        "--attention-backend": "attention_backend",
    },
}


@dataclass(frozen=True)
class EnvKnob:
    """One variable in one release.

    Attributes:
        defined: The release defines it (vLLM: its ``envs.py`` table; SGLang: ``environ.py`` or
            a read through ``get_bool_env_var``/``os.getenv``).
        read_in: A module other than the definition that reads it; None: read nowhere.
        parse: Probe value (and ``unset``) -> what the release's parser returned, or
            ``{"error": ...}`` where it refused; None where the read is a plain string.
    """

    defined: bool
    read_in: str | None
    parse: dict[str, Any] | None

    def reads_as(self, value: str) -> tuple[bool, Any]:
        """(proven, result): what the parser makes of ``value``; unproven where the value was
        not probed and the parser does not pass strings through."""
        if self.parse is None or "parse" in self.parse:
            return True, value  # a plain string read: whatever the value is
        if value in self.parse:
            return True, self.parse[value]
        passthrough = self.parse.get("x") == "x"
        return passthrough, value if passthrough else None


def refused(result: Any) -> bool:
    """The parser raised for the value."""
    return isinstance(result, dict) and "error" in result


def truthy(result: Any) -> bool:
    """How the engine's ``if`` reads a parsed value."""
    return bool(result) and not refused(result)


class KnobTable:
    """One engine's table: lookups by (knob, release); releases are the known ones only."""

    def __init__(self, data: dict[str, Any]) -> None:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"knob table schema {data.get('schema')!r}, expected {SCHEMA!r}")
        self.engine: str = data["engine"]
        self.releases: tuple[str, ...] = tuple(data["releases"])
        self._index = {release: i for i, release in enumerate(self.releases)}
        self._versions = tuple(Version(r) for r in self.releases)
        self._data = data
        self.replaced: dict[str, str] = data.get("replaced", {})

    @property
    def newest(self) -> str:
        return self.releases[-1]

    def _at(self, section: str, name: str, release: str) -> Any:
        where = self._index.get(release)
        if where is None:
            raise KeyError(f"{self.engine} {release} is not in the tables")
        for first, last, value in self._data[section].get(name, ()):
            if self._index[first] <= where <= self._index[last]:
                return value
        return None

    def env(self, name: str, release: str) -> EnvKnob | None:
        """The variable in ``release``; None where the release neither defines nor reads it."""
        entry = self._at("env", name, release)
        if entry is None:
            return None
        return EnvKnob(entry["defined"], entry["read"], entry["parse"])

    def options_in(self, release: str) -> tuple[str, ...]:
        """Every command-line option ``release`` takes."""
        return tuple(
            o for o in self._data["options"] if self._at("options", o, release) is not None
        )

    def option(self, option: str, release: str) -> tuple[str, ...] | None:
        """The option's choices in ``release`` (empty: any value); None: no such option."""
        choices = self._at("options", option, release)
        return None if choices is None else tuple(choices)

    def enum(self, name: str, release: str) -> tuple[str, ...] | None:
        entry = self._at("enums", name, release)
        return None if entry is None else tuple(entry["members"])

    def enum_for(self, knob: str) -> str | None:
        """The enum that reads ``knob``'s values (a variable or an option), if any."""
        return ENUM_VALUED.get(self.engine, {}).get(knob)

    def fact(self, name: str, release: str) -> tuple[Any, str | None]:
        """(value, file) of a selection fact in ``release``."""
        entry = self._at("facts", name, release)
        return (None, None) if entry is None else (entry["value"], entry["file"])

    def fact_names(self) -> tuple[str, ...]:
        return tuple(sorted(self._data["facts"]))

    def known_release(self, version: Version) -> str | None:
        """The release of the tables that ``version`` is (``0.32.0+cpu`` is 0.32.0: the local
        label aside, a post release stays itself); None where the tables do not list it."""
        base = Version(version.public)
        return next(
            (r for r, v in zip(self.releases, self._versions, strict=True) if v == base), None
        )

    def prefixed(self, name: str) -> bool:
        """``name`` is one of this engine's own variables (``VLLM_*`` for vLLM)."""
        return name.startswith(PREFIXES.get(self.engine, ("\0",)))


@cache
def knob_table(engine: str) -> KnobTable | None:
    """The bundled table of ``engine`` (``vllm``, ``sglang``); None for an engine without one."""
    if engine not in PREFIXES:
        return None
    text = resources.files(__name__).joinpath(f"{engine}.json").read_text()
    return KnobTable(json.loads(text))
