"""A cached variant's compiled kernels handed to Triton without its cache lookup
(kernelpolicy.kernels.sampling_triton.preload) and the variant index they are kept in
(BuiltRecord.write_index / read_index): Triton's own cache manager over a real directory; the
compiled kernels and the in-memory caches are stand-ins (a CompiledKernel needs a GPU)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined
pytest.importorskip("triton")

from kernelpolicy.kernel_cache import BuiltRecord
from kernelpolicy.kernels.sampling_triton import jit, preload
from kernelpolicy.limits import MAX_KERNEL_INDEX_BYTES

DESCRIPTION = '{"family": "triton sampler", "vocab": 300}'


class Jit:
    """A kernel's in-memory caches as Triton's JITFunction keeps them (per device: the cache of
    compiled kernels first), and the names an ASTSource reads."""

    __name__ = "kernel_fn"
    arg_names = ("logits", "rows", "BLOCK")

    def __init__(self) -> None:
        self.device_caches: dict[int, tuple[dict[str, Any], dict[Any, Any]]] = {0: ({}, {})}


class Compiled:
    """What Triton's CompiledKernel is built from (it needs a GPU backend)."""

    def __init__(self, src: Any, group: dict[str, str], hash: str) -> None:
        self.src, self.group, self.hash = src, group, hash
        self.name = Path(next(p for p in group if p.endswith(".json"))).stem


SIGNATURE = {"logits": "*fp32", "rows": "i32", "BLOCK": "constexpr"}


@pytest.fixture
def kernels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> jit.Kernels:
    """Fake kernels on device 0, Triton's cache in ``tmp_path/triton``, Compiled for
    CompiledKernel."""
    import triton.compiler.compiler

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setattr(preload, "_device", lambda: 0)
    monkeypatch.setattr(triton.compiler.compiler, "CompiledKernel", Compiled)
    return jit.Kernels().replace(**{name: Jit() for name in jit.names()})


def _launch(kernels: jit.Kernels, name: str, key: str, hash: str) -> None:
    """What Triton's run does for a launch: look the key up in memory; on a miss, compile (the
    files go to Triton's cache) and keep it there."""
    from triton.compiler.compiler import ASTSource
    from triton.runtime.cache import get_cache_manager

    memory = getattr(kernels, name).device_caches[0][0]
    if memory.get(key) is not None:
        return
    manager = get_cache_manager(hash)
    function = f"{name}_fn"
    group = {
        f"{function}.json": manager.put(json.dumps({"name": function}), f"{function}.json"),
        f"{function}.cubin": manager.put(b"\x7fELF", f"{function}.cubin"),
    }
    manager.put_group(f"{function}.json", group)
    source = ASTSource(getattr(kernels, name), SIGNATURE, {(2,): 1024})
    memory[key] = Compiled(source, group, hash)


def _memory(kernels: jit.Kernels, name: str) -> dict[str, Any]:
    return getattr(kernels, name).device_caches[0][0]  # type: ignore[no-any-return]


def _built(kernels: jit.Kernels, record: BuiltRecord) -> list[dict[str, Any]]:
    with preload.recording(kernels) as used:
        _launch(kernels, "group_kernel", "key-a", "a" * 64)
        _launch(kernels, "finish_kernel", "key-b", "b" * 64)
    entries = preload.entries(kernels, used)
    preload.keep(record, DESCRIPTION, entries)
    return entries


def _fresh(kernels: jit.Kernels) -> jit.Kernels:
    """Another process: empty in-memory caches, the same files."""
    return kernels.replace(**{name: Jit() for name in jit.names()})


def test_a_kept_variant_loads_into_a_fresh_process(kernels: jit.Kernels, tmp_path: Path) -> None:
    record = BuiltRecord(tmp_path / "kernels")
    entries = _built(kernels, record)
    assert sorted(e["kernel"] for e in entries) == ["finish_kernel", "group_kernel"]
    fresh = _fresh(kernels)
    assert sorted(preload.load(record, DESCRIPTION, fresh)) == [
        ("finish_kernel", "key-b"),
        ("group_kernel", "key-a"),
    ]
    loaded = _memory(fresh, "group_kernel")["key-a"]
    assert (loaded.hash, loaded.name) == ("a" * 64, "group_kernel_fn")
    assert loaded.src.fn is fresh.group_kernel  # the launcher is made from the source's
    assert (loaded.src.signature, loaded.src.constants) == (SIGNATURE, {(2,): 1024})
    assert sorted(loaded.group) == ["group_kernel_fn.cubin", "group_kernel_fn.json"]
    assert preload.load(record, DESCRIPTION, fresh) == []  # already in memory: kept as it is
    preload.forget(fresh, [("group_kernel", "key-a")])  # a call failed with it: Triton's own
    assert "key-a" not in _memory(fresh, "group_kernel")
    assert "key-b" in _memory(fresh, "finish_kernel")


def _gone(record: BuiltRecord, tmp_path: Path) -> None:
    for group in (tmp_path / "triton").rglob("__grp__*"):
        group.unlink()


def _damaged(record: BuiltRecord, tmp_path: Path) -> None:
    for index in (record.root / "index").iterdir():
        index.write_text("{not json")


def _group_writable(record: BuiltRecord, tmp_path: Path) -> None:
    for index in (record.root / "index").iterdir():
        index.chmod(0o664)


def _symlinked(record: BuiltRecord, tmp_path: Path) -> None:
    for index in (record.root / "index").iterdir():
        target = tmp_path / "elsewhere.json"
        index.rename(target)
        index.symlink_to(target)


def _oversized(record: BuiltRecord, tmp_path: Path) -> None:
    for index in (record.root / "index").iterdir():
        index.write_bytes(b" " * (MAX_KERNEL_INDEX_BYTES + 1))


def _foreign(record: BuiltRecord, tmp_path: Path) -> None:
    for index in (record.root / "index").iterdir():
        os.chown(index, 65534, 65534)


UNUSABLE: dict[str, Callable[[BuiltRecord, Path], None]] = {
    "the compiled files are gone": _gone,
    "a damaged index": _damaged,
    "a group-writable index": _group_writable,
    "a symlinked index": _symlinked,
    "an index over MAX_KERNEL_INDEX_BYTES": _oversized,
    "an index owned by another user": _foreign,
}


@pytest.mark.parametrize("name", UNUSABLE)
def test_an_index_that_cannot_be_used_loads_nothing(
    name: str, kernels: jit.Kernels, tmp_path: Path
) -> None:
    """Nothing is loaded, nothing raised: Triton's own lookup does the work, as before."""
    record = BuiltRecord(tmp_path / "kernels")
    _built(kernels, record)
    UNUSABLE[name](record, tmp_path)
    fresh = _fresh(kernels)
    assert preload.load(record, DESCRIPTION, fresh) == []
    assert _memory(fresh, "group_kernel") == {}


def test_another_description_or_library_is_another_index(
    kernels: jit.Kernels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = BuiltRecord(tmp_path / "kernels")
    _built(kernels, record)
    assert preload.load(record, DESCRIPTION.replace("300", "301"), _fresh(kernels)) == []
    monkeypatch.setattr(preload, "library_stamp", lambda: "libtriton.so:1:2")
    assert preload.load(record, DESCRIPTION, _fresh(kernels)) == []


def test_a_kernel_an_earlier_variant_compiled_is_in_the_next_ones_index(
    kernels: jit.Kernels, tmp_path: Path
) -> None:
    """Two variants built in one process share a kernel: the second finds it in memory (no
    compile), and its index has it all the same."""
    record = BuiltRecord(tmp_path / "kernels")
    _built(kernels, record)
    with preload.recording(kernels) as used:
        _launch(kernels, "group_kernel", "key-a", "a" * 64)  # shared: found in memory
        _launch(kernels, "row_kernel", "key-c", "c" * 64)
    assert [(e["kernel"], e["key"]) for e in preload.entries(kernels, used)] == [
        ("group_kernel", "key-a"),
        ("row_kernel", "key-c"),
    ]


def test_a_kernel_with_constants_json_cannot_hold_is_not_kept(kernels: jit.Kernels) -> None:
    """A constant that would not read back as itself (an object) leaves its kernel to
    Triton's own lookup; the others are kept."""
    with preload.recording(kernels) as used:
        _launch(kernels, "group_kernel", "key-a", "a" * 64)
        _launch(kernels, "finish_kernel", "key-b", "b" * 64)
    _memory(kernels, "finish_kernel")["key-b"].src.constants[(2,)] = object()
    assert [e["kernel"] for e in preload.entries(kernels, used)] == ["group_kernel"]


def test_another_thread_is_not_recorded(kernels: jit.Kernels) -> None:
    """A launch of another thread (a call served meanwhile) is not this build's."""
    import threading

    with preload.recording(kernels) as used:
        other = threading.Thread(target=_launch, args=(kernels, "row_kernel", "key-c", "c" * 64))
        other.start()
        other.join(30)
        _launch(kernels, "group_kernel", "key-a", "a" * 64)
    assert used == {("group_kernel", "key-a")}


def test_the_caches_are_plain_again_after_the_last_build(kernels: jit.Kernels) -> None:
    """Noting costs lookups only while a build records: nested builds (two threads) keep it
    until the last one ends, then every kernel's in-memory cache is a plain dict with all its
    entries."""
    with preload.recording(kernels) as outer:
        with preload.recording(kernels):
            _launch(kernels, "group_kernel", "key-a", "a" * 64)
        _launch(kernels, "row_kernel", "key-c", "c" * 64)
        assert type(_memory(kernels, "row_kernel")) is not dict
    assert ("row_kernel", "key-c") in outer
    for name in jit.names():
        assert type(_memory(kernels, name)) is dict, name
    assert sorted(_memory(kernels, "group_kernel")) == ["key-a"]


def test_no_launch_keeps_no_index(kernels: jit.Kernels, tmp_path: Path) -> None:
    record = BuiltRecord(tmp_path / "kernels")
    with preload.recording(kernels) as used:
        pass
    preload.keep(record, DESCRIPTION, preload.entries(kernels, used))
    assert not (record.root / "index").exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("hash", "../../../escaped", id="hash-climbs-out"),
        pytest.param("hash", "/abs/elsewhere", id="hash-absolute"),
        pytest.param("hash", "a" * 129, id="hash-too-long"),
        pytest.param("hash", "", id="hash-empty"),
        pytest.param("hash", "abc\n", id="hash-trailing-newline"),
        pytest.param("hash", 123, id="hash-not-a-string"),
        pytest.param("function", "../group_kernel_fn", id="function-climbs-out"),
        pytest.param("function", "a/b", id="function-with-a-separator"),
        pytest.param("function", None, id="function-not-a-string"),
    ],
)
def test_an_entry_not_named_as_triton_names_is_left_out(
    field: str, value: Any, kernels: jit.Kernels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry whose hash or function name could lead Triton's cache manager (which creates
    the directory it is given) out of its cache is ignored before the manager sees it; the
    index's other entries load."""
    import triton.runtime.cache

    record = BuiltRecord(tmp_path / "kernels")
    good = _built(kernels, record)
    bad = {**next(e for e in good if e["kernel"] == "group_kernel"), field: value}
    preload.keep(record, DESCRIPTION, [bad, *(e for e in good if e["kernel"] != "group_kernel")])
    asked: list[Any] = []
    real = triton.runtime.cache.get_cache_manager

    def spy(key: Any) -> Any:
        asked.append(key)
        return real(key)

    monkeypatch.setattr(triton.runtime.cache, "get_cache_manager", spy)
    fresh = _fresh(kernels)
    assert preload.load(record, DESCRIPTION, fresh) == [("finish_kernel", "key-b")]
    assert asked == ["b" * 64]
    assert _memory(fresh, "group_kernel") == {}
