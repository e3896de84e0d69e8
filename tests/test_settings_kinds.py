"""The settings' kinds are written once (``readers.KINDS``): every field of ``Settings`` has
exactly one, agreeing with the field's type, and the readers, the model and the memo take each
field's value by it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_type_hints

import pytest

from kernelpolicy.settings import FIELDS, Settings, given_variables, settings_from
from kernelpolicy.settings.memo import recall
from kernelpolicy.settings.readers import KINDS, Kind, read_value, variable

TYPES: dict[Kind, object] = {
    "boolean": bool,
    "path": Path | None,
    "directory": Path | None,
    "paths": tuple[Path, ...],
    "overrides": Mapping[str, str],
    "log_format": Literal["console", "json", "off"],
    "socket": str | None,
}
"""The field type each kind's reader gives."""

SAMPLES: dict[Kind, str] = {
    "boolean": "yes",
    "path": "/etc/kp/file.pem",
    "directory": "/var/cache/kernelpolicy",
    "paths": "+/etc/kp/policies.d:/opt/a.toml",
    "overrides": '{"sampler.greedy": "torch"}',
    "log_format": "json",
    "socket": "/run/kp.sock",
}
"""A value of each kind, as a variable spells it."""


def test_the_kinds_are_a_closed_set_each_with_a_type_and_a_sample() -> None:
    """Every kind is used and has its type and sample here (a new kind needs both)."""
    kinds = set(get_args(Kind))
    assert set(KINDS.values()) == kinds
    assert set(TYPES) == kinds == set(SAMPLES)


def test_every_field_has_exactly_one_kind() -> None:
    """KINDS names each field of Settings once, and nothing else."""
    assert sorted(KINDS) == sorted(FIELDS)
    assert len(KINDS) == len(FIELDS)


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in FIELDS])
def test_a_fields_kind_agrees_with_its_type(name: str) -> None:
    """The dataclass's type hint of the field is the type its kind's reader gives."""
    hints = get_type_hints(Settings)
    assert hints[name] == TYPES[KINDS[name]]


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in FIELDS])
def test_a_fields_value_is_read_and_remembered_by_its_kind(name: str, tmp_path: Path) -> None:
    """A sample of the field's kind is read by its reader into the field's type, and the memo
    stores and recalls it as the same value of the same type."""
    sample = str(tmp_path) if name == "cache_dir" else SAMPLES[KINDS[name]]
    env = {"KERNELPOLICY_CACHE_DIR": str(tmp_path), variable(name): sample}
    read = read_value(name, sample)
    first = settings_from(env)
    assert getattr(first, name) == read
    recalled: dict[str, Any] | None = recall(given_variables(env), FIELDS)
    assert recalled is not None, "the memo did not take the value back"
    assert recalled[name] == read
    assert type(recalled[name]) is type(read)
