"""Helpers shared by the engine tests: fixtures by name, resolution with the bundled pack."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

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


SMALL_TRITON_KERNELS = {
    "GROUP": 4, "GROUP_BLOCK": 256, "TOP_GROUPS": 64, "REGION": 64, "SMALL": 32,
    "W_BLOCK": 256, "W_SUB": 128, "LARGE": 64, "CAP": 256, "ROW_BLOCK": 256,
    "SELECT_CHUNK": 64,
}  # fmt: skip
"""The Triton sampler's tiles and buffers, shrunk (they are constexprs the host chooses) so that
the interpreter's sorts stay cheap; the kernel tests' vocabularies are small to match."""


def use_small_triton_kernels(monkeypatch: pytest.MonkeyPatch, sampling_triton: ModuleType) -> None:
    """Set :data:`SMALL_TRITON_KERNELS` on the sampler for one test, with fresh work buffers."""
    for name, value in SMALL_TRITON_KERNELS.items():
        monkeypatch.setattr(sampling_triton, name, value)
    sampling_triton._Scratch._cache.clear()
