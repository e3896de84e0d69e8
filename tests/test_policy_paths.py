"""A policy path that does not exist, and one this user cannot reach, say which they are
(before, a directory the user may not enter was "no such policy file or directory")."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.errors import PolicyError, SettingsError
from kernelpolicy.inputs import existing_policy_paths
from tests.helpers import said_as_user


def _message_as(uid: int, path: Path, ask: Any = None) -> str:
    """``ask(path)`` (default ``existing_policy_paths``) run by ``uid``: its error, or ``ok``."""

    def asked() -> str:
        try:
            if ask is None:
                existing_policy_paths([path], "--policies")
            else:
                ask(path)
        except (SettingsError, PolicyError) as exc:
            return str(exc)
        return "ok"

    return said_as_user(uid, asked)


CASES = {
    "missing": ("gone/pol", 0, "gone/pol: no such policy file or directory (from --policies)"),
    "readable": ("open/pol", 1001, "ok"),
    "behind-a-directory-the-user-cannot-enter": (
        "locked/pol", 1001, "locked/pol: cannot be read (from --policies): Permission denied",
    ),
}  # fmt: skip


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as another user")
@pytest.mark.parametrize(("name", "uid", "said"), list(CASES.values()), ids=list(CASES))
def test_a_policy_path_says_what_is_wrong(name: str, uid: int, said: str) -> None:
    base = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))  # pytest's own is 0700: none enters
    try:
        base.chmod(0o755)
        for directory, mode in (("open", 0o755), ("locked", 0o700)):
            (base / directory / "pol").mkdir(parents=True)
            (base / directory).chmod(mode)
        message = _message_as(uid, base / name)
    finally:
        shutil.rmtree(base)
    assert message.removeprefix(f"{base}/").startswith(said), message


@pytest.mark.parametrize("command", [["explain", "--policies"], ["check"], ["diff", "--against"]])
def test_a_directory_without_policy_files_is_named(tmp_path: Path, command: list[str]) -> None:
    """Before: "<policies>: no policy files found", naming neither the directory nor what a
    policy file is."""
    import subprocess
    import sys

    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "notes.txt").write_text("not a policy\n")
    done = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", *command, str(tmp_path / "policies")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    said = f"{tmp_path / 'policies'}: a directory with no *.toml files; expected policy files"
    assert said in done.stdout + done.stderr, done.stdout + done.stderr
    assert done.returncode != 0


@pytest.mark.parametrize(("files", "said"), [(1, "1 policy file)"), (2, "2 policy files)")])
def test_explain_counts_its_policy_files(tmp_path: Path, files: int, said: str) -> None:
    """Before: "1 policy files"."""
    from kernelpolicy.api import resolve
    from kernelpolicy.render import explain_table
    from tests.helpers import ROOT, fixture

    shutil.copy(ROOT / "tests/vllm_e2e/policies/e2e.toml", tmp_path)
    if files == 2:
        (tmp_path / "incident.toml").write_text(
            'schema = "kernelpolicy.policy/v1"\n[[disable]]\nfeature = "rmsnorm"\n'
            'impl = "mine"\nreason = "a test"\n'
        )
    resolution = resolve(fixture("cpu"), env={}, policies=[tmp_path])
    assert explain_table(resolution).splitlines()[0].endswith(said)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as another user")
def test_check_names_a_policy_directory_it_cannot_read() -> None:
    """check lists the files under its paths (policy_files): a directory behind one the user
    cannot enter was "cannot be loaded: PermissionError" and "1 problem in 0 files"."""
    from kernelpolicy.policy.files import policy_files

    base = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    try:
        base.chmod(0o755)
        (base / "locked" / "pol").mkdir(parents=True)
        (base / "locked").chmod(0o700)
        message = _message_as(1001, base / "locked" / "pol", lambda path: policy_files([path]))
    finally:
        shutil.rmtree(base)
    assert f"{base}/locked/pol: cannot be read: Permission denied" in message, message
