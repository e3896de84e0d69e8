"""The node's kernel cache: trusted as the evidence store is, handed to the engines exec starts,
filled by kernelpolicy warm (nothing to build without a GPU here; the GPU visit builds it)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpolicy.errors import UntrustedFileError
from kernelpolicy.kernel_cache import (
    BuiltRecord,
    cache_environment,
    cache_problem,
    kernel_cache_dir,
    prepare_kernel_cache,
    record_in_use,
)
from kernelpolicy.warming import tasks_for
from tests.helpers import resolve_on

NOBODY = 65534
FIXTURES = Path(__file__).resolve().parent.parent / "kernelpolicy/fixtures/platforms"


def _entry(root: Path) -> Path:
    entry = root / "triton" / "ABCDEF" / "kernel.cubin"
    entry.parent.mkdir(parents=True, mode=0o700)
    entry.write_bytes(b"\0code")
    entry.chmod(0o644)
    return entry


def test_a_prepared_cache_is_trusted(tmp_path: Path) -> None:
    root = prepare_kernel_cache(tmp_path)
    _entry(root)
    assert cache_problem(root) is None
    extra, problem = cache_environment(tmp_path, {})
    assert problem is None
    assert extra == {
        "TRITON_CACHE_DIR": str(root / "triton"),
        "FLASHINFER_WORKSPACE_BASE": str(root / "flashinfer"),
    }


def test_your_own_variables_are_kept(tmp_path: Path) -> None:
    prepare_kernel_cache(tmp_path)
    extra, _ = cache_environment(tmp_path, {"TRITON_CACHE_DIR": "/mine"})
    assert "TRITON_CACHE_DIR" not in extra


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a foreign owner needs root")
@pytest.mark.parametrize(
    ("how", "problem"),
    [
        pytest.param("foreign-entry", "owned by uid 65534", id="foreign-owned-entry"),
        pytest.param("group-writable-entry", "writable by group or others", id="group-writable"),
        pytest.param("symlinked-entry", "a symbolic link", id="symlinked-entry"),
        pytest.param("planted-directory", "owned by uid 65534", id="planted-directory"),
        pytest.param("world-writable-root", "writable by group or others", id="open-root"),
        pytest.param("open-cache-dir", "writable by others", id="open-cache-directory"),
        pytest.param("open-ancestor", "a directory above it", id="open-directory-above"),
        pytest.param("foreign-cache-dir", "owned by uid 65534", id="foreign-cache-directory"),
    ],
)
def test_an_untrusted_cache_is_not_used(tmp_path: Path, how: str, problem: str) -> None:
    outer = tmp_path / "outer"
    place = outer / "cache"
    place.mkdir(parents=True)
    root = prepare_kernel_cache(place)
    entry = _entry(root)
    if how == "foreign-entry":
        os.chown(entry, NOBODY, NOBODY)
    elif how == "group-writable-entry":
        entry.chmod(0o664)
    elif how == "symlinked-entry":
        entry.unlink()
        entry.symlink_to("/etc/hostname")
    elif how == "planted-directory":
        planted = root / "flashinfer" / "planted"
        planted.mkdir()
        os.chown(planted, NOBODY, NOBODY)
    elif how == "world-writable-root":
        root.chmod(0o777)
    elif how == "open-cache-dir":  # anyone could rename kernels/ away and put theirs there
        place.chmod(0o777)
    elif how == "open-ancestor":
        outer.chmod(0o777)
    elif how == "foreign-cache-dir":
        os.chown(place, NOBODY, NOBODY)
    extra, found = cache_environment(place, {})
    assert extra == {}
    assert found is not None
    assert problem in found


@pytest.mark.parametrize("mode", [0o777, 0o775], ids=["world-writable", "group-writable"])
def test_warm_refuses_a_cache_another_user_could_swap(tmp_path: Path, mode: int) -> None:
    """prepare_kernel_cache (warm, exec) will not make a kernel cache under a directory that
    someone else can write: they could swap it for theirs while engines read it for hours."""
    place = tmp_path / "shared"
    place.mkdir()
    place.chmod(mode)
    with pytest.raises(UntrustedFileError, match=f"refusing kernel cache .*{place}: writable"):
        prepare_kernel_cache(place)


def test_no_cache_no_variables(tmp_path: Path) -> None:
    extra, problem = cache_environment(tmp_path, {})
    assert extra == {}
    assert problem is not None
    assert "run kernelpolicy warm" in problem


def _exec(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    code = "import os; print(os.environ.get('TRITON_CACHE_DIR'))"
    env = {**os.environ, "KERNELPOLICY_CACHE_DIR": str(tmp_path), "KERNELPOLICY_LOG_FORMAT": "off"}
    env.pop("TRITON_CACHE_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "exec", "--engine", "vllm", "--platform",
         str(FIXTURES / "t4.json"), "--", sys.executable, "-c", code],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip


def test_exec_hands_a_trusted_cache_to_the_engine(tmp_path: Path) -> None:
    root = prepare_kernel_cache(tmp_path)
    assert _exec(tmp_path).stdout.strip() == str(root / "triton")


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a foreign owner needs root")
def test_exec_says_so_and_leaves_an_untrusted_cache_out(tmp_path: Path) -> None:
    root = prepare_kernel_cache(tmp_path)
    os.chown(_entry(root), NOBODY, NOBODY)
    done = _exec(tmp_path)
    assert done.stdout.strip() == "None"
    assert "kernelpolicy: warning: kernel cache not used:" in done.stderr


def test_warm_builds_what_the_decisions_route_to() -> None:
    """h100-sxm: FlashInfer and the Triton sampler, each dtype, each vocabulary class."""
    tasks = tasks_for(resolve_on("h100-sxm"), [32000, 128256])
    impls = {(t["impl"], t["dtype"], t["vocab"]) for t in tasks}
    assert ("triton", "bfloat16", 128256) in impls
    assert ("flashinfer", "float16", None) in impls
    assert len([t for t in tasks if t["impl"] == "triton"]) == 3 * 2
    assert tasks_for(resolve_on("mi300x"), [32000]) == []


def test_warm_without_a_gpu_builds_nothing_and_says_so(tmp_path: Path) -> None:
    env = {**os.environ, "KERNELPOLICY_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "warm", "--platform",
         str(FIXTURES / "h100-sxm.json"), "--json"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    report = json.loads(done.stdout)
    assert report["note"].endswith("nothing to build")
    assert report["tasks"] > 0
    assert not kernel_cache_dir(tmp_path).exists()  # nothing to build: no cache made


@pytest.mark.parametrize(
    ("triton", "spoil", "used", "problem"),
    [
        pytest.param(None, None, False, None, id="no-triton-cache"),
        pytest.param("mine/triton", None, False, None, id="a-triton-cache-of-your-own"),
        pytest.param("kernels/triton", None, True, None, id="the-kernel-cache"),
        pytest.param(
            "kernels/triton",
            "group-writable",
            False,
            "writable by group or others",
            id="group-writable-entry",
        ),
        pytest.param("kernels/triton", "symlink", False, "a symbolic link", id="symlinked-entry"),
    ],
)
def test_the_record_is_used_where_triton_uses_a_trusted_kernel_cache(
    tmp_path: Path, triton: str | None, spoil: str | None, used: bool, problem: str | None
) -> None:
    """A worker reads the record of the cache its Triton uses (TRITON_CACHE_DIR, as exec or
    verify set it), and only when the whole cache is trusted."""
    root = prepare_kernel_cache(tmp_path)
    entry = _entry(root)
    if spoil == "group-writable":
        entry.chmod(0o664)
    elif spoil == "symlink":
        (root / "built" / "planted").symlink_to(entry)
    environ = {} if triton is None else {"TRITON_CACHE_DIR": str(tmp_path / triton)}
    record, why = record_in_use(environ)
    assert (record is not None, why is not None) == (used, problem is not None)
    assert problem is None or problem in str(why)
    assert record is None or record.root == root


@pytest.mark.parametrize(
    ("how", "held"),
    [
        pytest.param("recorded", True, id="recorded"),
        pytest.param("never", False, id="never-recorded"),
        pytest.param("group-writable", False, id="group-writable-record"),
        pytest.param("symlink", False, id="symlinked-record"),
        pytest.param("directory", False, id="a-directory-in-its-place"),
    ],
)
def test_a_record_counts_when_it_is_a_trusted_file(tmp_path: Path, how: str, held: bool) -> None:
    """add() writes the variant's description under its digest; has() reads one lstat and
    refuses a record others could have written or a link."""
    record = BuiltRecord(prepare_kernel_cache(tmp_path))
    text = '{"variant": "bfloat16 top-k"}'
    if how != "never":
        record.add(text)
    path = record.path(text)
    if how == "group-writable":
        path.chmod(0o664)
    elif how == "symlink":
        path.unlink()
        path.symlink_to(tmp_path)
    elif how == "directory":
        path.unlink()
        path.mkdir()
    assert record.has(text) is held
    assert record.has(text + " ") is False
    if how == "recorded":
        assert path.read_text() == text
        assert cache_problem(record.root) is None  # the record keeps the cache trusted


@pytest.mark.parametrize(
    ("modes", "foreign", "trusted_after"),
    [
        pytest.param((0o775, 0o664), False, True, id="written-under-umask-002"),
        pytest.param((0o777, 0o666), False, True, id="written-under-umask-000"),
        pytest.param((0o700, 0o644), False, True, id="already-tight"),
        pytest.param(
            (0o775, 0o664), True, False, id="another-user's-entry-left-and-reported",
            marks=pytest.mark.skipif(os.geteuid() != 0, reason="a foreign owner needs root"),
        ),
    ],
)  # fmt: skip
def test_recording_a_build_tightens_what_it_wrote(
    tmp_path: Path, modes: tuple[int, int], foreign: bool, trusted_after: bool
) -> None:
    """Triton writes its kernels with the process's umask: group-writable under umask 002,
    which made the whole cache untrusted for the next worker. Recording the build takes group
    and other write away from the entries of ours (never following a link); another user's
    entry is left for cache_problem to report."""
    root = prepare_kernel_cache(tmp_path)
    entry = _entry(root)
    entry.parent.chmod(modes[0])
    entry.chmod(modes[1])
    outside = tmp_path / "outside"
    outside.write_bytes(b"not the cache's")
    outside.chmod(0o664)
    (root / "triton" / "link").symlink_to(outside)
    if foreign:
        os.chown(entry, NOBODY, NOBODY)
    BuiltRecord(root).add("a variant")
    assert stat.S_IMODE(outside.stat().st_mode) == 0o664  # the link was not followed
    (root / "triton" / "link").unlink()  # (a link makes the cache untrusted in any case)
    assert (cache_problem(root) is None) is trusted_after
    if not foreign:
        assert stat.S_IMODE(entry.stat().st_mode) == modes[1] & ~0o022
        assert stat.S_IMODE(entry.parent.stat().st_mode) == modes[0] & ~0o022
