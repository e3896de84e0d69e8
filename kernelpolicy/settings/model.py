"""The settings model: every ``KERNELPOLICY_*`` setting read and validated by pydantic-settings,
and its validation errors as one-line :class:`SettingsError` messages.

The settings are declared once, as the plain dataclass :class:`~kernelpolicy.settings.Settings`
(names, types, defaults); :func:`model_of` builds the pydantic-settings model from it, on
:class:`SettingsBase` (how values are read: prefix, sources, the readers). Imported only where
a setting is given (a variable set, or a keyword value): a process that sets none takes the
dataclass's defaults without pydantic.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from typing import Any, get_type_hints

from pydantic import Field, ValidationError, ValidationInfo, create_model, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from kernelpolicy.errors import SettingsError
from kernelpolicy.settings.readers import read_value, variable

__all__ = ["SettingsBase", "model_of", "validate"]

PREFIX = "KERNELPOLICY_"


class SettingsBase(BaseSettings):
    """How kernelpolicy's settings are read (the fields come from the dataclass that declares
    them, :func:`model_of`; :class:`~kernelpolicy.settings.Settings` says what each means).

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


@functools.cache
def model_of(declared: type) -> type[SettingsBase]:
    """The pydantic-settings model of the frozen dataclass ``declared``: its fields, in order,
    with their types and defaults (a default factory stays one), read as :class:`SettingsBase`
    reads them. Built once per class."""
    hints = get_type_hints(declared)
    definitions: dict[str, Any] = {}
    for item in dataclasses.fields(declared):
        default: Any = item.default
        if item.default_factory is not dataclasses.MISSING:
            default = Field(default_factory=item.default_factory)
        definitions[item.name] = (hints[item.name], default)
    return create_model(f"{declared.__name__}Model", __base__=SettingsBase, **definitions)


def validate(
    declared: type, environ: Mapping[str, str] | None, values: Mapping[str, Any]
) -> dict[str, object]:
    """Every field of ``declared`` from ``environ``'s variables (``None``: the process
    environment's) and ``values`` (which take precedence), validated by its model.

    Raises:
        SettingsError: The first value that does not fit (in field order), in one line naming
            the variable.
    """
    model = model_of(declared)
    try:
        if environ is None:
            read = model(**values)
        else:
            read = model.model_validate({**Variables(model, environ)(), **values})
    except ValidationError as exc:
        raise SettingsError(_message(exc, tuple(model.model_fields))) from None
    return {name: getattr(read, name) for name in model.model_fields}


def _message(exc: ValidationError, names: tuple[str, ...]) -> str:
    """The first error of ``exc`` as kernelpolicy words it (``names``: the settings)."""
    first = exc.errors(include_url=False)[0]
    name = str(first["loc"][0]) if first["loc"] else "?"
    if first["type"] == "extra_forbidden":
        return f"unknown setting {name!r}; expected one of {', '.join(names)}"
    error = first.get("ctx", {}).get("error")
    if first["type"] == "value_error" and isinstance(error, ValueError):
        return str(error)  # a reader's own message, naming the variable
    where = variable(name) if name in names else name
    return f"{where}: {first['msg']}"
