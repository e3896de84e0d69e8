"""Settings, parsed once, and the one boolean parser every switch uses.

``Settings()`` reads ``KERNELPOLICY_*`` variables (pydantic-settings) and is passed explicitly to
whatever needs it; nothing else in kernelpolicy reads the environment on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

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


_READERS: dict[str, Callable[[str, str], object]] = {
    "policy_paths": _read_paths,
    "overrides": _read_overrides,
    "allow_untrusted_files": parse_bool,
    "cache_dir": _path,
    "tls_cert_file": _path,
    "tls_key_file": _path,
    "tls_client_ca_file": _path,
}


def bundled_policy_dir() -> Path:
    """The policy pack that ships with kernelpolicy (``policies/`` in the source tree)."""
    return Path(__file__).resolve().parent / "bundled_policies"


class Settings(BaseSettings):
    """kernelpolicy's own settings, from ``KERNELPOLICY_*`` environment variables.

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
    """

    model_config = SettingsConfigDict(env_prefix="KERNELPOLICY_", extra="ignore", frozen=True)

    policy_paths: Annotated[tuple[Path, ...], NoDecode] = Field(
        default_factory=lambda: (bundled_policy_dir(),)
    )
    overrides: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    log_format: Literal["console", "json", "off"] = "console"
    cache_dir: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    allow_untrusted_files: bool = False

    @field_validator("*", mode="before")
    @classmethod
    def _read(cls, value: object, info: ValidationInfo) -> object:
        """Every string value is bounded and read here, by kernelpolicy's own readers.

        The errors raised are :class:`SettingsError` (not ``ValueError``), so they leave even a
        bare ``Settings()`` unchanged, naming the variable.
        """
        field = info.field_name or ""
        if isinstance(value, Path) and field == "policy_paths":
            return (value,)
        if not isinstance(value, str):
            return value
        name = f"KERNELPOLICY_{field.upper()}"
        if len(value) > MAX_SETTING_CHARS:
            raise SettingsError(
                f"{name}: {len(value)} characters is over MAX_SETTING_CHARS ({MAX_SETTING_CHARS})"
            )
        reader = _READERS.get(field)
        return value if reader is None else reader(name, value)


def _settings_error(exc: Any) -> SettingsError:
    """A pydantic ValidationError as one message naming each KERNELPOLICY_* variable."""
    problems = "; ".join(
        # loc is (field, key or index, ...): the variable, then where inside its value.
        f"KERNELPOLICY_{str(err['loc'][0]).upper()}"
        f"{''.join(f'[{part!r}]' for part in err['loc'][1:])}: {err['msg']}"
        for err in exc.errors()
    )
    return SettingsError(f"bad kernelpolicy settings: {problems}")


def load_settings() -> Settings:
    """Read settings from the environment, translating validation errors to SettingsError."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError as SourceError

    try:
        return Settings()
    except SourceError as exc:
        raise SettingsError(f"bad kernelpolicy settings: {exc} (expected JSON)") from None
    except ValidationError as exc:
        raise _settings_error(exc) from None


class _MappingSettings(Settings):
    """Settings from explicit values only: no environment, no dotenv, no secrets directory."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def settings_from(env: Mapping[str, str]) -> Settings:
    """Settings from ``KERNELPOLICY_*`` entries of ``env`` (not the process environment).

    Raises:
        SettingsError: A value does not fit, naming the variable.
    """
    from pydantic import ValidationError

    values: dict[str, object] = {}
    for name in Settings.model_fields:
        raw = env.get(f"KERNELPOLICY_{name.upper()}")
        if raw is not None:
            values[name] = raw
    try:
        return _MappingSettings.model_validate(values)
    except ValidationError as exc:
        raise _settings_error(exc) from None
