"""The readers of settings values: each ``KERNELPOLICY_*`` variable's form, bounded, and the
one boolean parser every switch uses. Plain functions, no pydantic: the settings model
(:mod:`kernelpolicy.settings.model`) validates through them, and ``engine`` switches and the
bridge parse booleans with :func:`parse_bool`."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from kernelpolicy.cache_dir import default_cache_dir
from kernelpolicy.errors import SettingsError
from kernelpolicy.limits import MAX_SETTING_CHARS, shown
from kernelpolicy.safeio import parse_json

__all__ = [
    "ACCEPTED_BOOLEANS",
    "KINDS",
    "Kind",
    "bundled_policy_dir",
    "parse_bool",
    "read_value",
    "validated_cache_dir",
    "variable",
]

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


def switched_on(env: Mapping[str, str], name: str) -> bool:
    """Whether the switch ``name`` in ``env`` is on by :func:`parse_bool`; unset, blank or a
    value that is no boolean is off (for switches read where a bad value must not stop
    anything: the engines' variables the bridge matches rules on, the plugin's switch)."""
    value = env.get(name, "")
    try:
        return bool(value.strip()) and parse_bool(name, value)
    except SettingsError:
        return False


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


def _directory(name: str, value: str) -> Path:
    """An absolute path to a directory: a relative one is another place in each directory a
    command runs in, and would be made there in silence (the XDG base directory specification
    says the same of ``XDG_CACHE_HOME``)."""
    path = _path(name, value)
    if not path.is_absolute():
        what = "an empty value" if not value.strip() else "a relative path"
        raise SettingsError(
            f"{name}={shown(value)!r}: {what}; expected an absolute path to a directory, "
            "such as /var/cache/kernelpolicy"
        )
    return path


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
    path = value.removeprefix("unix:")
    if "\0" in value or not path.startswith("/") or not path.strip("/"):
        # absolute: a worker and the daemon started in different directories meet there
        raise SettingsError(f"{name}={shown(value)!r}: expected a unix socket, unix:/path or /path")
    return f"unix:{path}"


Kind = Literal["boolean", "path", "directory", "paths", "overrides", "log_format", "socket"]
"""The form of a setting's value, each read by one reader (:data:`KINDS` says each field's)."""

KINDS: dict[str, Kind] = {
    "policy_paths": "paths",
    "overrides": "overrides",
    "log_format": "log_format",
    "cache_dir": "directory",
    "tls_cert_file": "path",
    "tls_key_file": "path",
    "tls_client_ca_file": "path",
    "allow_untrusted_files": "boolean",
    "pack_cache": "boolean",
    "hardware_cache": "boolean",
    "socket": "socket",
    "report": "boolean",
}
"""Every setting's kind, the one table of them: the readers, the settings model's validator and
the settings memo (:mod:`kernelpolicy.settings.memo`) all go by it (a test keeps its keys the
fields of :class:`~kernelpolicy.settings.Settings`, each kind agreeing with the field's type)."""

_READERS: dict[Kind, Callable[[str, str], Any]] = {
    "paths": _read_paths,
    "overrides": _read_overrides,
    "log_format": _read_log_format,
    "path": _path,
    "directory": _directory,
    "boolean": parse_bool,
    "socket": _socket,
}


def bundled_policy_dir() -> Path:
    """The policy pack that ships with kernelpolicy (``policies/`` in the source tree)."""
    return Path(__file__).resolve().parent.parent / "bundled_policies"


def validated_cache_dir(given: Mapping[str, str], *, create: bool) -> Path | None:
    """The cache directory of the validated caches (the settings memo, the compiled code)
    for the variables ``given``, or None where there is none: ``KERNELPOLICY_PACK_CACHE``
    turns them off, the variables that name the place do not read (the settings model says
    what is wrong with them, a relative directory among them), or ``KERNELPOLICY_CACHE_DIR``
    names it and it is not a directory while ``create`` is False (reading settings never makes
    the directory a variable names)."""
    try:
        switch = given.get(variable("pack_cache"))
        if switch is not None and not read_value("pack_cache", switch):
            return None
        raw = given.get(variable("cache_dir"))
        base = read_value("cache_dir", raw) if raw is not None else default_cache_dir()
    except SettingsError:
        return None
    assert isinstance(base, Path)  # the cache_dir reader's value: absolute
    if raw is not None and not create and not _is_dir(base):
        return None
    return base


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a name too long, a permission: no directory to use
        return False


def variable(name: str) -> str:
    """The variable of setting ``name``: ``log_format`` -> ``KERNELPOLICY_LOG_FORMAT``."""
    return f"KERNELPOLICY_{name.upper()}"


def _read(name: str, value: str) -> object:
    """A string value of field ``name``, bounded and read by its reader."""
    where = variable(name)
    if len(value) > MAX_SETTING_CHARS:
        raise SettingsError(
            f"{where}: {len(value)} characters is over MAX_SETTING_CHARS ({MAX_SETTING_CHARS})"
        )
    return _READERS[KINDS[name]](where, value)


def read_value(name: str, value: Any) -> object:
    """One field's value as the model's validator takes it: a string is read as the
    environment's is (bounded, then by the field's reader); anything else is type-checked.

    Raises:
        SettingsError: The value does not fit, naming the variable.
    """
    if isinstance(value, str):
        return _read(name, value)
    kind = KINDS[name]
    if kind == "paths" and isinstance(value, Path | Iterable):
        paths = (value,) if isinstance(value, Path) else tuple(value)
        return tuple(_path(variable(name), str(p)) for p in paths)
    if kind in ("path", "directory"):
        return None if value is None else _READERS[kind](variable(name), str(value))
    if kind == "overrides" and isinstance(value, Mapping):
        return _read(name, json.dumps(dict(value)))
    if kind == "boolean" and isinstance(value, bool):
        return value
    raise SettingsError(f"setting {name}: unexpected {type(value).__name__} value")
