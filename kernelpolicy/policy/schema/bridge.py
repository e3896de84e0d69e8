"""The bridge's part of a policy: how an unmodified inference engine is told to run a choice.

The ``engines`` tables of a candidate or a feature (see :mod:`kernelpolicy.policy.schema`); read
by the bridge (``kernelpolicy env``, ``kernelpolicy exec``) and proven by ``kernelpolicy check``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import Field, field_validator, model_validator

from kernelpolicy.limits import MAX_ENGINE_RULE_WORDS, MAX_ENV_VALUE_CHARS
from kernelpolicy.policy.schema.conditions import (
    ENV_NAME,
    IDENT,
    LibrarySpec,
    Strict,
    Vendor,
    check_arch_list,
    check_libraries,
    check_specifier,
)

FactValue = bool | str | list[str]
_FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_.-]*(=.*)?\Z", re.DOTALL)


def _plain_text(what: str, value: str) -> str:
    if any(ch in value for ch in "\0\n\r"):
        raise ValueError(f"{what} {value[:40]!r}: newlines and NUL bytes are not allowed")
    if len(value) > MAX_ENV_VALUE_CHARS:
        raise ValueError(f"{what}: longer than MAX_ENV_VALUE_CHARS ({MAX_ENV_VALUE_CHARS})")
    return value


class EngineRule(Strict):
    """How one inference engine is told to run an implementation, under conditions.

    An engine's rules are tried in order; the first whose conditions all hold applies. The
    conditions: ``versions`` (a PEP 440 range on the engine's installed distribution, such as
    ``vllm``), ``vendor``, ``arch`` (the primary device), ``libraries`` (as for candidates) and
    ``if_on`` (environment switches that must be true in the environment the engine will see:
    the user's, with what the other decisions tell it). What it tells the engine: ``env``
    (variable -> value, in the form the engine's own parser accepts) and ``flags`` (words
    appended to its command line). ``inexpressible`` says, instead or as well, that the engine
    cannot be made to run exactly this, and what the operator gives up; ``shared_switch`` names
    the one variable that would express it only by also turning other kernels off, so that the
    bridge can list them. ``plugin`` says that kernelpolicy's plugin inside the engine carries
    the choice (what it does, such as "routes the sampler per call"), where the engine has no
    variable or flag for it (:mod:`kernelpolicy.vllm_plugin`). ``facts`` names the engine's
    selection facts the rule relies on (as the knob tables record them, such as
    ``mhc = "ungated"``): ``kernelpolicy check`` proves that each holds in every release the
    rule covers.
    """

    versions: str | None = None
    vendor: Vendor | None = None
    arch: list[str] | None = None
    libraries: dict[str, LibrarySpec] = Field(default_factory=dict)
    if_on: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list, max_length=MAX_ENGINE_RULE_WORDS)
    inexpressible: str | None = None
    shared_switch: str | None = None
    plugin: str | None = None
    facts: dict[str, FactValue] = Field(default_factory=dict)
    reference: str | None = None

    _versions = field_validator("versions")(lambda cls, v: check_specifier(v))
    _libs = field_validator("libraries")(lambda cls, v: check_libraries(v))

    @field_validator("arch")
    @classmethod
    def _arch_names(cls, value: list[str] | None) -> list[str] | None:
        return check_arch_list(value)

    @field_validator("if_on")
    @classmethod
    def _switch_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name (A-Z, 0-9, _)")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_ENGINE_RULE_WORDS:
            raise ValueError(f"more than MAX_ENGINE_RULE_WORDS ({MAX_ENGINE_RULE_WORDS}) variables")
        for name, text in value.items():
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name (A-Z, 0-9, _)")
            _plain_text(f"value of {name}", text)
        return value

    @field_validator("flags")
    @classmethod
    def _flags(cls, value: list[str]) -> list[str]:
        for word in value:
            _plain_text("flag", word)
        if value and not _FLAG.match(value[0]):
            raise ValueError(
                f"flags start with an option such as '--attention-backend', not {value[0]!r}"
            )
        for word in value:
            if word.startswith("--") and not _FLAG.match(word):
                raise ValueError(f"flag {word!r}: expected --name or --name=value")
        return value

    @field_validator("facts")
    @classmethod
    def _fact_names(cls, value: dict[str, FactValue]) -> dict[str, FactValue]:
        for name in value:
            if not IDENT.fullmatch(name):
                raise ValueError(
                    f"fact {name!r}: expected lower_snake_case such as 'aiter_sampler'"
                )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> EngineRule:
        if self.shared_switch is not None:
            if not ENV_NAME.match(self.shared_switch):
                raise ValueError(f"shared_switch {self.shared_switch!r} is not a variable name")
            if self.inexpressible is None:
                raise ValueError("'shared_switch' explains an 'inexpressible' rule: add one")
        if self.plugin is not None:
            _plain_text("plugin", self.plugin)
            if self.inexpressible is not None:
                raise ValueError("a rule is carried by the plugin or inexpressible, not both")
        return self


def check_engines(value: dict[str, list[EngineRule]]) -> dict[str, list[EngineRule]]:
    """Engine names are lower_snake_case, as their distributions are (``vllm``, ``sglang``)."""
    for engine in value:
        if not IDENT.match(engine):
            raise ValueError(f"engine {engine!r}: expected lower_snake_case such as 'vllm'")
    return value


def flag_options(words: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """Split command-line words into (option, values): ``--a x --b=y`` -> a:(x,), b:(y,)."""
    options: list[tuple[str, tuple[str, ...]]] = []
    for word in words:
        if word.startswith("--"):
            option, sep, value = word.partition("=")
            options.append((option, (value,) if sep else ()))
        elif options:
            option, values = options[-1]
            options[-1] = (option, (*values, word))
    return options
