"""The README's fix for a checkout made under ``umask 002``: run as written in such a checkout,
the tutorial's ``check`` passes (before, ``chmod -R go-w docs`` left the checkout's own
directory group-writable, and every policy file below it was refused)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT


def _readme_fix() -> str:
    """The one shell command of the README's ``umask 002`` paragraph."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    paragraph = text.split("A checkout made under `umask 002`", 1)[1].split("\n\n", 2)
    (command,) = re.findall(r"```bash\n(.+?)\n```", "\n\n".join(paragraph[:2]), flags=re.S)
    return command


def _umask_002_copy(tmp_path: Path) -> Path:
    """The docs' tutorial in a checkout whose directories are 0775 and files 0664."""
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "docs" / "tutorial", checkout / "docs" / "tutorial")
    for path in [checkout, *checkout.rglob("*")]:
        path.chmod(0o775 if path.is_dir() else 0o664)
    return checkout


@pytest.mark.parametrize("fixed", [False, True], ids=["as-checked-out", "after-the-readme-fix"])
def test_the_tutorial_runs_after_the_readme_fix(tmp_path: Path, fixed: bool) -> None:
    checkout = _umask_002_copy(tmp_path)
    if fixed:
        subprocess.run(["bash", "-c", _readme_fix()], cwd=checkout, check=True, timeout=60)
    done = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "check", "docs/tutorial/policies.d"],
        cwd=checkout, capture_output=True, text=True, timeout=120, check=False,
        env=os.environ | {"PYTHONPATH": f"{ROOT}{os.pathsep}docs/tutorial"},
    )  # fmt: skip
    if fixed:
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert done.returncode != 0
        assert "writable by its group" in done.stdout + done.stderr
