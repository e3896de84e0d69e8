"""The settings model: every ``KERNELPOLICY_*`` setting's type, default and validation, read
by pydantic-settings, and its validation errors as one-line :class:`SettingsError` messages.

Imported only where a setting is given (a variable set, or a keyword value): a process that
sets none takes :class:`~kernelpolicy.settings.Settings`' defaults without pydantic.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from kernelpolicy.errors import SettingsError
from kernelpolicy.settings.readers import bundled_policy_dir, read_value, variable

__all__ = ["SettingsModel", "validate"]

PREFIX = "KERNELPOLICY_"


class SettingsModel(BaseSettings):
    """kernelpolicy's settings as pydantic-settings reads them (see
    :class:`~kernelpolicy.settings.Settings` for what each one means, and the plain value
    that every caller holds; a test keeps its defaults equal to these).

    Every value goes through :func:`kernelpolicy.settings.read_value` before its type is
    checked: strings by the same readers whatever their source (the environment, a mapping,
    a keyword), so that ``1/0/true/false/yes/no/on/off`` is the one boolean form, a policy path
    list is ``a:b`` or JSON, and each error names the variable and what was expected.
    """

    model_config = SettingsConfigDict(
        env_prefix=PREFIX,
        enable_decoding=False,  # the readers parse JSON themselves, bounded
        extra="forbid",
        frozen=True,
        validate_default=False,  # the defaults are plain values, valid as they are
    )

    policy_paths: tuple[Path, ...] = Field(default_factory=lambda: (bundled_policy_dir(),))
    overrides: Mapping[str, str] = Field(default_factory=dict)
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

    @field_validator("*", mode="before")
    @classmethod
    def _read(cls, value: Any, info: ValidationInfo) -> Any:
        assert info.field_name is not None  # a field validator always has its field
        try:
            return read_value(info.field_name, value)
        except SettingsError as exc:
            raise ValueError(str(exc)) from exc  # pydantic collects it; validate() translates

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keywords, then the process environment's variables (no dotenv or secret files)."""
        return init_settings, Variables(settings_cls)


class Variables(EnvSettingsSource):
    """The settings' variables of ``environ`` (default: the process environment), spelled
    exactly as :data:`kernelpolicy.settings.VARIABLES` names them (``KERNELPOLICY_LOG_FORMAT``):
    a lower-case ``kernelpolicy_log_format`` is not a setting, as it never was."""

    def __init__(
        self, settings_cls: type[BaseSettings], environ: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(settings_cls, case_sensitive=False, env_prefix=PREFIX)
        source = os.environ if environ is None else environ
        names = (variable(name) for name in settings_cls.model_fields)
        self.env_vars = {name.lower(): source[name] for name in names if name in source}


def validate(environ: Mapping[str, str] | None, values: Mapping[str, Any]) -> dict[str, object]:
    """Every field's value from ``environ``'s variables (``None``: the process environment's)
    and ``values`` (which take precedence), validated.

    Raises:
        SettingsError: The first value that does not fit (in field order), in one line naming
            the variable.
    """
    try:
        if environ is None:
            model = SettingsModel(**values)
        else:
            model = SettingsModel.model_validate({**Variables(SettingsModel, environ)(), **values})
    except ValidationError as exc:
        raise SettingsError(_message(exc)) from None
    return {name: getattr(model, name) for name in SettingsModel.model_fields}


def _message(exc: ValidationError) -> str:
    """The first error of ``exc`` as kernelpolicy words it."""
    first = exc.errors(include_url=False)[0]
    name = str(first["loc"][0]) if first["loc"] else "?"
    if first["type"] == "extra_forbidden":
        return f"unknown setting {name!r}; expected one of {', '.join(SettingsModel.model_fields)}"
    error = first.get("ctx", {}).get("error")
    if first["type"] == "value_error" and isinstance(error, ValueError):
        return str(error)  # a reader's own message, naming the variable
    where = variable(name) if name in SettingsModel.model_fields else name
    return f"{where}: {first['msg']}"
