"""Settings, parsed once, and the one boolean parser every switch uses.

``Settings()`` reads ``KERNELPOLICY_*`` variables and is passed explicitly to whatever needs
it. Only this package reads a setting's variable: every other module takes its settings from
``Settings``/:func:`settings_from` (a test scans the package for a second reader). A few
front ends take the process environment themselves, once, at their boundary, and read any
setting in it through these readers: ``resolve()`` and the CLI (the answer's environment, and
this machine's settings with ``--env``), the compiled-code cache (where it lives, at first
use, by :func:`~kernelpolicy.settings.readers.validated_cache_dir`) and the vLLM plugin (its
switch by :func:`parse_bool`, its inputs by ``kernelpolicy.bridge.plugin.read_plugin_inputs``).
Variables that are not settings are read where they are used, for example the probe's (the
devices a process sees, from the mapping it is given), ``XDG_CACHE_HOME`` and
``XDG_RUNTIME_DIR`` for the default places, ``TRITON_*`` by the kernels, the plugin's
``KERNELPOLICY_VLLM_PLUGIN_STATS``, and ``KERNELPOLICY_FORCE_*`` and the engines' switches as
part of the answer's environment. Those are the one list :data:`NOT_SETTINGS`: with the
settings' :data:`VARIABLES`, every ``KERNELPOLICY_*`` variable kernelpolicy knows. Any other
(``KERNELPOLICY_SOCKETT``) is ignored, and said once per process, with the known name closest
to it (:func:`unknown_variables`): a warning through the ``kernelpolicy`` logger, as the
library's other warnings are, which the CLI shows on stderr.

The settings are declared once, by the :class:`Settings` dataclass; the variables are read and
validated by the pydantic-settings model built from it
(:func:`kernelpolicy.settings.model.model_of`, prefix ``KERNELPOLICY_``), whose validation
errors become one-line :class:`SettingsError` messages at this boundary. A process
whose environment sets none of the variables (the common case: a worker) takes the defaults
without importing pydantic or pydantic-settings, about 130 ms that would otherwise land on
its first ``resolve()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from kernelpolicy.cache_dir import default_cache_dir
from kernelpolicy.limits import MAX_UNKNOWN_VARIABLES_SAID
from kernelpolicy.settings.readers import (
    ACCEPTED_BOOLEANS,
    bundled_policy_dir,
    parse_bool,
    switched_on,
    variable,
)

__all__ = [
    "ACCEPTED_BOOLEANS",
    "FIELDS",
    "NOT_SETTINGS",
    "VARIABLES",
    "Settings",
    "bundled_policy_dir",
    "default_cache_dir",
    "given_variables",
    "load_settings",
    "parse_bool",
    "settings_from",
    "switched_on",
    "unknown_message",
    "unknown_variables",
]


@dataclass(frozen=True)
class Settings:
    """kernelpolicy's own settings, from ``KERNELPOLICY_*`` environment variables.

    ``Settings()`` reads the process environment; :func:`settings_from` reads a mapping;
    ``Settings.of(field=value, ...)`` builds one from values directly (tests, embedding).

    Attributes:
        policy_paths: Policy files or directories, in order (``KERNELPOLICY_POLICY_PATHS``,
            colon-separated like PATH, or a JSON list). Default: the bundled pack.
        overrides: Feature -> implementation to force (``KERNELPOLICY_OVERRIDES``, JSON object);
            ``KERNELPOLICY_FORCE_<FEATURE>`` variables take precedence.
        log_format: ``console`` (one readable line per resolution on stderr), ``json`` or ``off``.
        cache_dir: Where ``kernelpolicy verify`` stores evidence (default
            ``$XDG_CACHE_HOME/kernelpolicy``, else ``~/.cache/kernelpolicy``).
        tls_cert_file, tls_key_file: The daemon's TLS certificate and key (PEM); with them,
            every TCP listener uses TLS.
        tls_client_ca_file: With it, clients must present a certificate signed by this CA.
        allow_untrusted_files: Accept policy files, policy directories and the evidence store
            even when another user owns them or can write them (``kernelpolicy.trust``). Off by
            default; for people who share such files on purpose.
        pack_cache: Keep validated policy packs in ``<cache dir>/packs`` so that later
            processes skip validation (``KERNELPOLICY_PACK_CACHE``, default on; see
            :mod:`kernelpolicy.policy.packcache`).
        hardware_cache: Keep the node's GPU facts in ``<cache dir>/node/hardware.json`` so
            that a worker's first ``resolve()`` skips NVML (``KERNELPOLICY_HARDWARE_CACHE``,
            default on; see :mod:`kernelpolicy.platform.hardware_cache`).
        socket: The node daemon's unix socket (``KERNELPOLICY_SOCKET``, ``unix:/path`` or a
            path); default: this user's private one. Workers report run-time events beside it.
        report: Report run-time events (kernels loaded, guard trips, run-time failures) to the
            node's daemon when one listens (``KERNELPOLICY_REPORT``, default on).

    The one declaration of the settings: plain frozen values, validated by the
    pydantic-settings model built from these fields (:func:`~kernelpolicy.settings.model.model_of`)
    when variables or keywords are given, and straight from these defaults when none is (no
    pydantic import on a worker's cold start).
    """

    policy_paths: tuple[Path, ...] = field(default_factory=lambda: (bundled_policy_dir(),))
    overrides: Mapping[str, str] = field(default_factory=dict)
    log_format: Literal["console", "json", "off"] = "console"
    cache_dir: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    allow_untrusted_files: bool = False
    pack_cache: bool = True
    hardware_cache: bool = True
    socket: str | None = None
    report: bool = True

    def __init__(self, **values: Any) -> None:
        """Read ``KERNELPOLICY_*`` from the process environment; ``values`` take precedence
        (strings go through the same readers as the environment's).

        Raises:
            SettingsError: A value does not fit, naming the variable.
        """
        import os

        _say_unknown(os.environ)  # first: said even where a setting's value is refused
        _assign(self, _validated(os.environ, values, process=True))

    @classmethod
    def of(cls, **values: Any) -> Settings:
        """Settings from ``values`` only (no environment)."""
        settings = object.__new__(cls)
        _assign(settings, _validated({}, values))
        return settings


FIELDS = tuple(f.name for f in fields(Settings))


VARIABLES = {variable(name): name for name in FIELDS}
"""Each setting's variable, spelled exactly so (``KERNELPOLICY_LOG_FORMAT`` -> ``log_format``)."""


NOT_SETTINGS: dict[str, str] = {
    "KERNELPOLICY_FORCE_": "kernelpolicy/engine/switches.py",  # one per feature: engine.forces
    "KERNELPOLICY_VLLM_PLUGIN": "kernelpolicy/bridge/plugin.py",  # the plugin's switch
    "KERNELPOLICY_VLLM_PLUGIN_INPUTS": "kernelpolicy/bridge/plugin.py",  # exec's inputs for it
    "KERNELPOLICY_VLLM_PLUGIN_STATS": "kernelpolicy/vllm_plugin.py",  # its call counts
    "KERNELPOLICY_VLLM_ENV": "scripts/test-deps",  # the source tree's vLLM test environment
    "KERNELPOLICY_E2E_COUNTS": "tests/vllm_e2e/e2e_kernels.py",  # its end-to-end test's
}
"""The ``KERNELPOLICY_*`` variables that are not settings, each with the file that reads it (a
name that ends in ``_`` is a prefix): read where they are used, or by the source tree's tests
and scripts (docs/engines.md). With :data:`VARIABLES`, every variable kernelpolicy knows: a
test keeps it equal to the ``KERNELPOLICY_*`` literals of those files and the package."""

_PREFIX = variable("")
_PREFIXES = tuple(name for name in NOT_SETTINGS if name.endswith("_"))
_SAID: set[str] = set()


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """The ``KERNELPOLICY_*`` variables of ``env`` that kernelpolicy does not read: neither a
    setting's nor one of :data:`NOT_SETTINGS` (a misspelled ``KERNELPOLICY_SOCKETT``)."""
    if _PREFIX not in "\0".join(env):  # one pass in C for a process that sets none
        return []
    return [
        name
        for name in env
        if name.startswith(_PREFIX)
        and name not in VARIABLES
        and name not in NOT_SETTINGS
        and not name.startswith(_PREFIXES)
    ]


def _say_unknown(env: Mapping[str, str]) -> None:
    """Say each unknown variable of ``env`` once per process, with the known name closest to
    it: a warning of the library (``kernelpolicy.unknown_variable``, its ``message`` and
    ``variable``), through the ``kernelpolicy`` logger in ``env``'s ``KERNELPOLICY_LOG_FORMAT``
    (:func:`kernelpolicy.logs.log_warning`: a host that configured no logging sees nothing; the
    CLI shows it on stderr, :func:`kernelpolicy.logs.warnings_on_stderr`). A process that sets
    no ``KERNELPOLICY_*`` variable pays one pass over its variables' names, importing nothing."""
    unknown = [name for name in unknown_variables(env) if name not in _SAID]
    for name in unknown[: max(MAX_UNKNOWN_VARIABLES_SAID - len(_SAID), 0)]:
        _SAID.add(name)
        message = unknown_message(name)
        if message is not None:
            from kernelpolicy.encoding import one_line
            from kernelpolicy.logs import log_warning

            said = {"variable": one_line(name, 80), "message": message}
            log_warning("kernelpolicy.unknown_variable", _log_format(env), to_terminal=True, **said)


def _log_format(env: Mapping[str, str]) -> str:
    """``env``'s log format, read before the settings are validated (a bad value is refused
    then; until that, console)."""
    value = env.get(variable("log_format"), "console")
    return value if value in ("console", "json", "off") else "console"


def unknown_message(name: str) -> str | None:
    """What is said of the unknown variable ``name``: that kernelpolicy ignores it, and the
    known names closest to it (compared by what follows the prefix, which alone would make
    every name close); ``None`` where no known name is close: then it is no misspelling of
    ours but a name of its own (a policy's switch may be called ``KERNELPOLICY_DEMO_FAST``),
    and nothing is said."""
    from kernelpolicy.encoding import one_line
    from kernelpolicy.suggest import close_names

    tails = {v.removeprefix(_PREFIX): v for v in (*VARIABLES, *NOT_SETTINGS) if v[-1] != "_"}
    found = close_names(name.removeprefix(_PREFIX), tails)
    if not found:
        return None
    return (
        f"unknown variable {one_line(name, 80)} (no setting of kernelpolicy's; ignored unless "
        f"a policy reads it); did you mean {' or '.join(tails[f] for f in found)}?"
    )


def given_variables(env: Mapping[str, str]) -> dict[str, str]:
    """The settings' variables ``env`` sets (others, ``KERNELPOLICY_FORCE_*`` included, are
    not settings)."""
    return {name: env[name] for name in VARIABLES if name in env}


def _validated(
    env: Mapping[str, str], values: Mapping[str, Any], *, process: bool = False
) -> dict[str, object]:
    """The fields ``env``'s variables and ``values`` set, validated by the model; nothing (the
    defaults) without importing it when neither sets one, and the values an earlier process
    validated when only variables are given and the memo holds them
    (:mod:`kernelpolicy.settings.memo`). ``process``: ``env`` is the process environment,
    which the model reads itself."""
    given = given_variables(env)
    if not given and not values:
        return {}
    if not values:  # variables only: an earlier process may have validated the same ones
        from kernelpolicy.settings.memo import recall

        found = recall(given, FIELDS)
        if found is not None:
            return found
    from kernelpolicy.settings.model import validate  # pydantic, only now

    validated = validate(Settings, None if process else given, values)
    if not values:
        from kernelpolicy.settings.memo import remember

        remember(given, validated)
    return validated


def _assign(settings: Settings, values: Mapping[str, object]) -> None:
    for item in fields(Settings):
        if item.name in values:
            value = values[item.name]
        elif item.default_factory is not MISSING:
            value = item.default_factory()
        else:
            value = item.default
        object.__setattr__(settings, item.name, value)


def load_settings() -> Settings:
    """Read settings from the process environment.

    Raises:
        SettingsError: A value does not fit, naming the variable.
    """
    return Settings()


def settings_from(env: Mapping[str, str]) -> Settings:
    """Settings from ``KERNELPOLICY_*`` entries of ``env`` (not the process environment).

    Raises:
        SettingsError: A value does not fit, naming the variable.
    """
    settings = object.__new__(Settings)
    _say_unknown(env)
    _assign(settings, _validated(env, {}))
    return settings
