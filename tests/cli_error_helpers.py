"""What the CLI error tests share (tests/test_cli_errors*.py): ``kernelpolicy`` run as a user
runs it, the one error line it must print, and whether torch (and a GPU) is here."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, ROOT

CPU = str(FIXTURES / "cpu.json")
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="verify needs torch")


def cuda_here() -> bool:
    """Whether torch is here and sees a GPU."""
    if not HAS_TORCH:
        return False
    import torch

    return bool(torch.cuda.is_available())


def kernelpolicy(
    *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python3 -m kernelpolicy ARGV`` as a user runs it, with this checkout on PYTHONPATH."""
    full = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("KERNELPOLICY_") or k == "KERNELPOLICY_CACHE_DIR"
    }
    full.update({"PYTHONPATH": str(ROOT), "KERNELPOLICY_LOG_FORMAT": "off", **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "kernelpolicy", *argv],
        capture_output=True, text=True, env=full, cwd=cwd, check=False, timeout=300,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line ``done`` wrote on stderr, an error line (never a traceback)."""
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("kernelpolicy: error: ")
    return lines[0]
