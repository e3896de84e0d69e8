"""The evidence store is trusted like a policy file: private, owner-checked, never written
through a link (issue 10, finding 9)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelpolicy.api import resolve
from kernelpolicy.errors import UntrustedFileError
from kernelpolicy.evidence.store import (
    evidence_path,
    load_evidence,
    store_evidence,
    temp_path,
)
from tests.evidence_helpers import POLICY, RESULT
from tests.helpers import FIXTURES, ROOT, fixture

OTHER_UID = 65534  # nobody
SECRET = b"root's secret\n"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _victim(tmp_path: Path) -> Path:
    """A 0600 file of ours (root's, when the suite runs as root) outside the store."""
    victim = tmp_path / "victim"
    victim.write_bytes(SECRET)
    victim.chmod(0o600)
    return victim


def test_store_is_created_private(tmp_path: Path) -> None:
    """The store directory is 0700 and the file 0600, whatever the umask."""
    old = os.umask(0)
    try:
        path = store_evidence(fixture("cpu"), [RESULT], "now", tmp_path / "cache")
    finally:
        os.umask(old)
    assert _mode(path.parent) == 0o700
    assert _mode(path) == 0o600


@pytest.mark.parametrize(
    "planted_at",
    [
        pytest.param(lambda path: path, id="evidence-path"),
        pytest.param(
            lambda path: path.with_name(f".{path.name}.{os.getpid()}.tmp"), id="old-temp-name"
        ),
    ],
)
def test_planted_link_is_replaced_not_followed(
    tmp_path: Path, planted_at: Callable[[Path], Path]
) -> None:
    """A symbolic link at the evidence file or at a temporary name beside it never redirects
    the write, and no temporary file is left."""
    platform = fixture("cpu")
    cache = tmp_path / "cache"
    path = store_evidence(platform, [RESULT], "now", cache)
    victim = _victim(tmp_path)
    link = planted_at(path)
    if link != path:
        link.symlink_to(victim)
    else:
        path.unlink()
        path.symlink_to(victim)
    store_evidence(platform, [RESULT], "later", cache)
    assert victim.read_bytes() == SECRET
    assert _mode(victim) == 0o600
    assert not path.is_symlink()
    assert load_evidence(platform, cache).get("sampler.greedy", "fast") is not None
    assert [p for p in path.parent.glob(temp_path(path).name) if p != link] == []


def test_store_directory_link_is_refused(tmp_path: Path) -> None:
    """A link in place of the store directory could point anywhere: writing is refused."""
    cache = tmp_path / "cache"
    cache.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (cache / "evidence").symlink_to(elsewhere)
    with pytest.raises(UntrustedFileError, match="not a directory"):
        store_evidence(fixture("cpu"), [RESULT], "now", cache)
    assert list(elsewhere.iterdir()) == []


def _chown(path: Path) -> None:
    os.chown(path, OTHER_UID, OTHER_UID)


def _chmod_open(path: Path) -> None:
    path.chmod(0o777)


def _chmod_group(path: Path) -> None:
    path.chmod(0o770)


UNTRUSTED = [
    pytest.param(
        "cache", _chown, f"owned by uid {OTHER_UID}", marks=needs_root, id="cache-dir-other-owner"
    ),
    pytest.param("cache", _chmod_open, "writable by others (mode 0777", id="cache-dir-0777"),
    pytest.param(
        "store", _chown, f"owned by uid {OTHER_UID}", marks=needs_root, id="store-other-owner"
    ),
    pytest.param("store", _chmod_open, "writable by others (mode 0777", id="store-0777"),
    pytest.param("store", _chmod_group, "writable by its group (mode 0770", id="store-0770"),
]


def _planted(tmp_path: Path, where: str, change: Callable[[Path], None]) -> tuple[Path, Path]:
    """A "passed" evidence file in a store another user could have written."""
    cache = tmp_path / "cache"
    path = store_evidence(fixture("cpu"), [RESULT], "now", cache)
    change(cache if where == "cache" else path.parent)
    return cache, path


@pytest.mark.parametrize(("where", "change", "message"), UNTRUSTED)
def test_untrusted_store_is_not_read(
    tmp_path: Path, where: str, change: Callable[[Path], None], message: str
) -> None:
    """Reading: no evidence, and the problem names the directory, the owner and the mode."""
    cache, path = _planted(tmp_path, where, change)
    evidence = load_evidence(fixture("cpu"), cache)
    assert evidence.entries == {}
    assert evidence.problem is not None
    assert message in evidence.problem
    assert str(cache if where == "cache" else path.parent) in evidence.problem
    assert "KERNELPOLICY_ALLOW_UNTRUSTED_FILES=1" in evidence.problem
    accepted = load_evidence(fixture("cpu"), cache, allow_untrusted=True)
    assert accepted.get("sampler.greedy", "fast") is not None


@pytest.mark.parametrize(("where", "change", "message"), UNTRUSTED)
def test_untrusted_store_is_not_written(
    tmp_path: Path, where: str, change: Callable[[Path], None], message: str
) -> None:
    """Writing: refused with the same reason, and the planted file is left as it was."""
    cache, path = _planted(tmp_path, where, change)
    before = path.read_bytes()
    with pytest.raises(UntrustedFileError, match=message.replace("(", r"\(")):
        store_evidence(fixture("cpu"), [{**RESULT, "status": "failed"}], "later", cache)
    assert path.read_bytes() == before


@needs_root
def test_file_planted_by_another_user_is_not_read(tmp_path: Path) -> None:
    """A file another user owns in our own store is refused too."""
    cache = tmp_path / "cache"
    path = store_evidence(fixture("cpu"), [RESULT], "now", cache)
    _chown(path)
    evidence = load_evidence(fixture("cpu"), cache)
    assert evidence.entries == {}
    assert evidence.problem is not None
    assert f"{path}: owned by uid {OTHER_UID}" in evidence.problem


@pytest.mark.parametrize(
    ("allow", "impl"),
    [pytest.param(None, "torch", id="refused"), pytest.param("1", "fast", id="opt-out")],
)
@pytest.mark.parametrize(("where", "change", "message"), UNTRUSTED[:2])
def test_planted_evidence_does_not_verify_a_candidate(
    tmp_path: Path,
    where: str,
    change: Callable[[Path], None],
    message: str,
    allow: str | None,
    impl: str,
) -> None:
    """End to end through resolve(): planted "passed" evidence in a store another user can
    write does not make the engine choose a `verified = true` candidate; explain says why. The
    explicit opt-out accepts it."""
    cache, _ = _planted(tmp_path, where, change)
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    env = {"KERNELPOLICY_CACHE_DIR": str(cache), "KERNELPOLICY_LOG_FORMAT": "off"}
    if allow is not None:
        env["KERNELPOLICY_ALLOW_UNTRUSTED_FILES"] = allow
    decision = resolve(fixture("cpu"), env, [policy]).decision("sampler.greedy")
    assert decision.impl == impl
    if allow is None:
        failure = decision.candidates[0].failures[0]
        assert "not verified on this platform" in failure.message
        assert message in failure.message


def test_explain_shows_the_refusal(tmp_path: Path) -> None:
    """`kernelpolicy explain` shows the one-line reason beside the rejected candidate."""
    cache, _ = _planted(tmp_path, "cache", _chmod_open)
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "KERNELPOLICY_CACHE_DIR": str(cache),
        "KERNELPOLICY_LOG_FORMAT": "off",
    }
    env.pop("KERNELPOLICY_ALLOW_UNTRUSTED_FILES", None)
    argv = [sys.executable, "-m", "kernelpolicy", "explain", "--platform",
            str(FIXTURES / "cpu.json"), "--policies", str(policy)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert "sampler.greedy" in done.stdout
    assert f"refusing evidence store {cache}: writable by others (mode 0777" in done.stdout
    assert "sampler.greedy -> torch" in done.stdout
    assert evidence_path(fixture("cpu"), cache).exists()
