"""Shared fixtures: fake machines built with the fakes that ship in kernelpolicy.testing."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.testing.machines import fixture_dir


@pytest.fixture
def fixtures() -> Path:
    return fixture_dir()


@pytest.fixture
def empty_root(tmp_path: Path) -> Path:
    """A filesystem root with nothing in it: no sysfs, no /opt/rocm, no torch."""
    root = tmp_path / "root"
    root.mkdir()
    return root
