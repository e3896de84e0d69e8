"""`kernelpolicy verify` never writes this process's environment (STYLE.md: no code writes back
into os.environ): the kernel cache it uses is handed down explicitly
(kernelpolicy/kernels/cache_lookup.py's contexts), Triton is pointed at it through Triton's own
setting, and a build's child process gets its environment as a dict. Each run here replaces
os.environ with a mapping that refuses writes."""

from __future__ import annotations

import os
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main
from kernelpolicy.kernel_cache import VARIABLES, BuiltRecord, kernel_cache_dir, prepare_kernel_cache
from kernelpolicy.kernels import cache_lookup


class ReadOnlyEnviron(MutableMapping[str, str]):
    """os.environ's contents, read as usual; each write is kept in ``writes`` and refused."""

    def __init__(self, items: dict[str, str]) -> None:
        self._items = items
        self.writes: list[str] = []

    def __getitem__(self, name: str) -> str:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __setitem__(self, name: str, value: str) -> None:
        self.writes.append(f"{name}={value}")
        raise RuntimeError(f"os.environ written: {name}={value}")

    def __delitem__(self, name: str) -> None:
        self.writes.append(f"del {name}")
        raise RuntimeError(f"os.environ written: del {name}")

    def copy(self) -> dict[str, str]:
        return dict(self._items)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A trusted kernel cache under KERNELPOLICY_CACHE_DIR, none of its variables set."""
    monkeypatch.setenv("KERNELPOLICY_CACHE_DIR", str(tmp_path))
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return prepare_kernel_cache(tmp_path)


@pytest.mark.parametrize(
    ("gpu", "argv"),
    [
        pytest.param(False, ["--feature", "topk_per_row", "--quick"], id="a-real-cpu-run"),
        pytest.param(True, ["--feature", "sampler.top_k_top_p"], id="a-gpu-run-faked"),
    ],
)
def test_verify_reads_the_environment_and_never_writes_it(
    gpu: bool, argv: list[str], cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, with os.environ refusing writes, verify runs, exits 0 and wrote nothing into
    it; the samplers see the cache's record, and on a run that builds kernels Triton and a
    background build's child process are given the cache's Triton directory."""
    from kernelpolicy.cli import verify_cmd
    from kernelpolicy.verify import suite

    seen: dict[str, Any] = {}
    run = suite.iter_run

    def iter_run(*args: Any, **kwargs: Any) -> Iterator[Any]:
        record = cache_lookup.kernel_cache()
        seen["record"] = None if record is None else record.root
        if gpu:  # what the sampler's build uses: Triton's setting, the child's environment
            import triton

            from kernelpolicy.kernels.sampling_triton import child

            seen["triton"] = triton.knobs.cache.dir
            seen["child"] = child.environment()["TRITON_CACHE_DIR"]
            return iter(())
        return run(*args, **kwargs)

    monkeypatch.setattr(suite, "iter_run", iter_run)
    monkeypatch.setattr(verify_cmd, "_builds_kernels", lambda device: gpu)
    environ = ReadOnlyEnviron(dict(os.environ))
    with monkeypatch.context() as scoped:  # put back before pytest writes its own variable
        scoped.setattr(os, "environ", environ)
        code = main(["verify", "--no-store", *argv])
    assert environ.writes == []
    assert code == 0
    assert seen.pop("record") == cache
    if gpu:
        assert seen == {"triton": str(cache / "triton"), "child": str(cache / "triton")}


@pytest.mark.parametrize(
    "record",
    [pytest.param(True, id="a-record"), pytest.param(False, id="no-kernel-cache")],
)
def test_using_kernel_cache_answers_then_puts_the_lookup_back(record: bool, tmp_path: Path) -> None:
    """Within using_kernel_cache, every thread's kernel_cache() is the record given, with no
    look; after it, the lookup that was in place answers again."""
    import threading

    given = BuiltRecord(kernel_cache_dir(tmp_path)) if record else None
    outer = prepare_kernel_cache(tmp_path / "outer")
    with cache_lookup.looking_for_kernel_cache({"TRITON_CACHE_DIR": str(outer / "triton")}):
        with cache_lookup.using_kernel_cache(given):
            answers: list[object] = []
            thread = threading.Thread(target=lambda: answers.append(cache_lookup.kernel_cache()))
            thread.start()
            thread.join(60)
            assert answers == [given]
            assert cache_lookup.kernel_cache() is given
        found = cache_lookup.kernel_cache()
        assert found is not None
        assert found.root == outer


def test_looking_for_kernel_cache_looks_in_the_mapping_given(tmp_path: Path) -> None:
    """looking_for_kernel_cache looks in the mapping given, never in os.environ, and the look
    made there is forgotten when it ends."""
    root = prepare_kernel_cache(tmp_path)
    with cache_lookup.looking_for_kernel_cache({"TRITON_CACHE_DIR": str(root / "triton")}):
        found = cache_lookup.kernel_cache()
        assert found is not None
        assert found.root == root
    with cache_lookup.looking_for_kernel_cache({}):
        assert cache_lookup.kernel_cache() is None
