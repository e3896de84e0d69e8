"""`kernelpolicy probe` as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpolicy.cli import main

FIXTURES = Path(__file__).parent.parent / "kernelpolicy/fixtures"


def test_probe_json_as_a_process() -> None:
    """The real command on this machine prints a valid snapshot and exits 0."""
    out = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "probe", "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    data = json.loads(out.stdout)
    assert data["schema"] == "kernelpolicy.platform/v1"
    assert data["vendor"] in {"nvidia", "amd", "none"}
    assert "torch" in data["libraries"]


def test_probe_table_of_a_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    """--platform FILE renders a snapshot taken elsewhere as a table."""
    assert main(["probe", "--platform", str(FIXTURES / "platforms/mi355x.json")]) == 0
    out = capsys.readouterr().out
    assert "vendor amd, driver 6.14.14, ROCm 7.0.2-56" in out
    assert "AMD Instinct MI355X  gfx950  9.5  256" in out
    assert "amd-aiter" in out


def test_probe_fake_root(capsys: pytest.CaptureFixture[str]) -> None:
    """--root points the real probe at a fake sysfs tree."""
    assert main(["probe", "--json", "--no-nvml", "--root", str(FIXTURES / "roots/mi250x")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["arch"] for d in data["devices"]] == ["gfx90a"] * 8


def test_probe_errors_are_shown(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Probe errors appear in the table with what they mean."""
    snapshot = json.loads((FIXTURES / "platforms/cpu.json").read_text())
    snapshot["probe_errors"] = ["nvml: cannot initialise: Driver Not Loaded"]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(snapshot))
    main(["probe", "--platform", str(path)])
    assert (
        "Probe errors (affected kernels fall back)\n  - nvml: cannot initialise"
        in capsys.readouterr().out
    )


def test_bad_platform_file_is_one_clear_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A bad --platform file exits 2 with one error, no traceback."""
    path = tmp_path / "bad.json"
    path.write_text("[]")
    assert main(["probe", "--platform", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernelpolicy: error: ")
    assert "Traceback" not in err


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    """Running with no command shows the help with examples and exits 2."""
    assert main([]) == 2
    assert "kernelpolicy probe --json" in capsys.readouterr().out
