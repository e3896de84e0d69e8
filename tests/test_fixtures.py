"""The shipped platform fixtures: current, loadable, and produced by the real probe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpolicy import Platform, load_platform
from kernelpolicy.testing import MACHINES, probe_machine
from kernelpolicy.testing.machines import write_root

PLATFORMS = sorted(
    (Path(__file__).parent.parent / "kernelpolicy/fixtures/platforms").glob("*.json")
)
REQUIRED = {
    "h100-sxm",
    "h200",
    "a100",
    "l4",
    "t4",
    "b200",
    "mi250x",
    "mi300x",
    "mi325x",
    "mi355x",
    "rx7900xtx",
    "cpu",
}


def test_every_required_machine_has_a_fixture() -> None:
    """The fixture set covers the machines the fleet runs, plus real-NVML snapshots."""
    names = {p.stem for p in PLATFORMS}
    assert names >= REQUIRED
    assert {"h100-real", "h200-real"} <= names


@pytest.mark.parametrize("path", PLATFORMS, ids=[p.stem for p in PLATFORMS])
def test_fixture_loads_and_round_trips(path: Path) -> None:
    """Each snapshot validates, and dumping it again gives the same JSON."""
    platform = load_platform(path)
    assert platform.to_dict() == json.loads(path.read_text())
    assert Platform.from_dict(platform.to_dict()) == platform


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_fixture_comes_out_of_the_real_probe(name: str, fixtures: Path) -> None:
    """Probing the committed fake root (KFD tree for AMD) reproduces the committed snapshot."""
    probed = probe_machine(MACHINES[name])
    assert probed == load_platform(fixtures / "platforms" / f"{name}.json")


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_fake_roots_are_current(name: str, fixtures: Path, tmp_path: Path) -> None:
    """The committed fake trees are what scripts/gen_fixtures.py writes today."""
    fresh = write_root(MACHINES[name], tmp_path / name)
    committed = fixtures / "roots" / name
    fresh_files = _files(fresh)
    assert fresh_files == _files(committed), "run: python scripts/gen_fixtures.py"


def _files(root: Path) -> dict[Path, bytes]:
    """Every file under ``root`` but bytecode (``python -m compileall kernelpolicy`` writes it
    into the trees' fake packages; it is never committed)."""
    return {
        p.relative_to(root): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_real_h100_fixture_is_real() -> None:
    """The H100 snapshot came from real NVML: full UUID and bus id, no probe errors."""
    platform = load_platform(
        Path(__file__).parent.parent / "kernelpolicy/fixtures/platforms/h100-real.json"
    )
    dev = platform.devices[0]
    assert (dev.name, dev.compute_units, dev.memory_mib) == ("NVIDIA H100 80GB HBM3", 132, 81559)
    assert dev.uuid.startswith("GPU-")  # type: ignore[attr-defined]
    assert platform.probe_errors == ()
