"""Helpers shared by the engine tests: fixtures by name, resolution with the bundled pack."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from kernelpolicy import Platform, load_platform
from kernelpolicy.engine import Resolution, resolve_policies
from kernelpolicy.policy import PolicySet, load_policies

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "kernelpolicy/fixtures/platforms"


@cache
def bundled() -> PolicySet:
    return load_policies([ROOT / "policies"])


def fixture(name: str) -> Platform:
    return load_platform(FIXTURES / f"{name}.json")


def with_device(name: str, **changes: Any) -> Platform:
    """A fixture with its devices' fields changed (e.g. arch, compute_units)."""
    platform = fixture(name)
    devices = tuple(d.replace(**changes) for d in platform.devices)
    return platform.replace(**{"devices": devices})


def with_libraries(name: str, **versions: str | None) -> Platform:
    platform = fixture(name)
    libraries = dict(platform.libraries)
    for key, value in versions.items():
        dist = key.replace("_", "-")
        if value is None:
            libraries.pop(dist, None)
        else:
            libraries[dist] = value
    return platform.replace(**{"libraries": libraries})


def resolve_on(platform: Platform | str, **env: str) -> Resolution:
    if isinstance(platform, str):
        platform = fixture(platform)
    return resolve_policies(platform, env, bundled())
