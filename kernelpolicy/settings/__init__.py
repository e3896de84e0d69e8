"""Settings, parsed once, and the one boolean parser every switch uses.

``Settings()`` reads ``KERNELPOLICY_*`` variables and is passed explicitly to
whatever needs it; nothing else in kernelpolicy reads the environment on its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from kernelpolicy.errors import SettingsError
from kernelpolicy.limits import MAX_SETTING_CHARS, shown
from kernelpolicy.safeio import parse_json

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
ACCEPTED_BOOLEANS = "1/0, true/false, yes/no, on/off (any case)"
_OVERRIDES_FORM = '{"sampler.greedy": "torch"}'


def parse_bool(name: str, value: str) -> bool:
    """The only boolean parser: 1/0/true/false/yes/no/on/off in any case.

    Args:
        name: The variable's name, for the error message.
        value: Its value.

    Raises:
        SettingsError: Anything else, naming the variable and the accepted values; the value
            is shown cut to ``SHOWN_ENV_VALUE_CHARS``.
    """
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SettingsError(f"{name}={shown(value)!r} is not a boolean: expected {ACCEPTED_BOOLEANS}")


def _read_paths(name: str, value: str) -> tuple[Path, ...]:
    """``a.toml:policies.d`` (like PATH) or a JSON list of paths."""
    if value.lstrip().startswith("["):
        items = parse_json(value, name, SettingsError)
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise SettingsError(f'{name}: expected a JSON list of paths such as ["a.toml", "d"]')
        parts: list[str] = items
    else:
        parts = [part for part in value.split(":") if part]
    return tuple(_path(name, part) for part in parts)


def _path(name: str, value: str) -> Path:
    if "\0" in value:
        raise SettingsError(f"{name}: a path with a NUL character; expected a file or directory")
    return Path(value)


def _read_overrides(name: str, value: str) -> dict[str, str]:
    def fail(message: str) -> SettingsError:
        return SettingsError(
            f"{name}={shown(value)!r}: expected a JSON object such as {_OVERRIDES_FORM} ({message})"
        )

    data = parse_json(value, name, fail)
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise SettingsError(
            f"{name}: expected a JSON object of feature -> implementation name such as "
            f"{_OVERRIDES_FORM}"
        )
    return data


_LOG_FORMATS = ("console", "json", "off")


def _read_log_format(name: str, value: str) -> str:
    if value not in _LOG_FORMATS:
        raise SettingsError(f"{name}={shown(value)!r}: expected one of {', '.join(_LOG_FORMATS)}")
    return value


def _socket(name: str, value: str) -> str:
    if "\0" in value or not value.removeprefix("unix:").strip("/"):
        raise SettingsError(f"{name}={shown(value)!r}: expected a unix socket, unix:/path or /path")
    return value if value.startswith("unix:") else f"unix:{value}"


_READERS: dict[str, Callable[[str, str], Any]] = {
    "log_format": _read_log_format,
    "policy_paths": _read_paths,
    "overrides": _read_overrides,
    "allow_untrusted_files": parse_bool,
    "pack_cache": parse_bool,
    "hardware_cache": parse_bool,
    "report": parse_bool,
    "socket": _socket,
    "cache_dir": _path,
    "tls_cert_file": _path,
    "tls_key_file": _path,
    "tls_client_ca_file": _path,
}


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/kernelpolicy``, else ``~/.cache/kernelpolicy``: the evidence store and
    the compiled-pack cache live under it unless ``KERNELPOLICY_CACHE_DIR`` says otherwise."""
    import os

    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kernelpolicy"


def bundled_policy_dir() -> Path:
    """The policy pack that ships with kernelpolicy (``policies/`` in the source tree)."""
    return Path(__file__).resolve().parent / "bundled_policies"


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

    Plain values, not a pydantic model: reading settings is on the cold-start path of every
    worker, and each variable has its own reader here anyway.
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

        merged = _from_env(os.environ)
        merged.update(_checked(values))
        _assign(self, merged)

    @classmethod
    def of(cls, **values: Any) -> Settings:
        """Settings from ``values`` only (no environment)."""
        settings = object.__new__(cls)
        _assign(settings, _checked(values))
        return settings


FIELDS = tuple(f.name for f in fields(Settings))


def _read(name: str, value: str) -> object:
    """A string value of field ``name``, bounded and read by its reader."""
    variable = f"KERNELPOLICY_{name.upper()}"
    if len(value) > MAX_SETTING_CHARS:
        raise SettingsError(
            f"{variable}: {len(value)} characters is over MAX_SETTING_CHARS ({MAX_SETTING_CHARS})"
        )
    return _READERS[name](variable, value)


def _from_env(env: Mapping[str, str]) -> dict[str, object]:
    values: dict[str, object] = {}
    for name in FIELDS:
        raw = env.get(f"KERNELPOLICY_{name.upper()}")
        if raw is not None:
            values[name] = _read(name, raw)
    return values


def _checked(values: Mapping[str, Any]) -> dict[str, object]:
    """Keyword values: strings read as the environment's are, others type-checked."""
    out: dict[str, object] = {}
    for name, value in values.items():
        if name not in FIELDS:
            raise SettingsError(f"unknown setting {name!r}; expected one of {', '.join(FIELDS)}")
        if isinstance(value, str):
            out[name] = _read(name, value)
        elif name == "policy_paths":
            paths = (value,) if isinstance(value, Path) else tuple(value)
            out[name] = tuple(_path("KERNELPOLICY_POLICY_PATHS", str(p)) for p in paths)
        elif name in _PATH_FIELDS:
            out[name] = None if value is None else _path(f"KERNELPOLICY_{name.upper()}", str(value))
        elif name == "overrides":
            out[name] = _read(name, json.dumps(dict(value)))
        elif name in ("allow_untrusted_files", "pack_cache", "hardware_cache", "report") and (
            isinstance(value, bool)
        ):
            out[name] = value
        else:
            raise SettingsError(f"setting {name}: unexpected {type(value).__name__} value")
    return out


_PATH_FIELDS = frozenset({"cache_dir", "tls_cert_file", "tls_key_file", "tls_client_ca_file"})


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
    _assign(settings, _from_env(env))
    return settings
