"""`kernelpolicy probe` as a user runs it."""

from __future__ import annotations

import io
import json
import os
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


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(b"[" * 100_000, "over MAX_NESTING_DEPTH", id="deep"),
        pytest.param(b"\xff\xfe{}", "<stdin>: not UTF-8", id="not-utf8"),
        pytest.param(b" " * (4 * 1024 * 1024 + 1), "over MAX_PLATFORM_FILE_BYTES", id="too-large"),
        pytest.param(b'{"vendor": NaN}', "NaN is not a JSON number", id="nan"),
        pytest.param(b"{", "<stdin>:1:2: not JSON", id="not-json"),
    ],
)
def test_platform_from_stdin_is_bounded(
    data: bytes, message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--platform - reads standard input with the file's limits: one line, exit 2."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["probe", "--platform", "-"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernelpolicy: error: ")
    assert message in err
    assert "Traceback" not in err
    assert len(err) < 1000


def test_platform_fifo_does_not_hang(tmp_path: Path) -> None:
    """A FIFO nobody writes to is refused at once (the timeout only guards the test run)."""
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    out = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "probe", "--platform", str(fifo)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "not a regular file (a FIFO)" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        pytest.param(
            "KERNELPOLICY_OVERRIDES", "[" * 5000, "KERNELPOLICY_OVERRIDES=", id="deep-overrides"
        ),
        pytest.param(
            "KERNELPOLICY_POLICY_PATHS", "[" * 5000,
            "KERNELPOLICY_POLICY_PATHS: nested more than 32", id="deep-policy-paths",
        ),
        pytest.param(
            "KERNELPOLICY_LOG_FORMAT", "x" * 70_000, "over MAX_SETTING_CHARS", id="long-setting"
        ),
    ],
)  # fmt: skip
def test_bad_settings_are_one_line_in_the_cli(
    variable: str, value: str, message: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A setting that once raised RecursionError is one error line and exit 2."""
    monkeypatch.setenv(variable, value)
    snapshot = str(FIXTURES / "platforms/h100-sxm.json")
    assert main(["explain", "--platform", snapshot]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernelpolicy: error: ")
    assert message in err
    assert "Traceback" not in err
    assert len(err) < 1000
