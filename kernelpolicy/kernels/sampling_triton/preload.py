"""A cached variant's compiled kernels handed to Triton without Triton's own cache lookup.

Triton finds a compiled kernel in its cache under a key that hashes its own installation
(``triton_key()``, which reads all of ``libtriton.so``: 0.36-0.5 s on the lent H100, once per
process) before it reads any file. When a variant is built with the kernel cache in use
(``kernelpolicy warm``'s children, a worker's background build), the kernels its build
launched (Triton's key of each launch's specialisation and options -> the compiled kernel's
hash and name; noted as Triton looks them up, so that kernels several variants share are in
each one's index) are kept as the variant's index
(:meth:`~kernelpolicy.kernel_cache.BuiltRecord.write_index`). A process that loads the variant
reads the index first and puts each kernel, built by Triton's ``CompiledKernel`` from the
group of files Triton's cache manager names for that hash (with the source's signature and
constants, which Triton's launcher is made from), into the kernel's in-memory cache, where the
first call finds it.

To note what a build launches, each kernel's in-memory cache is, while a build runs, a dict
that also notes the keys the building thread looks up (:func:`recording`); a lookup costs about
0.5 us more then (eager launches of calls served meanwhile), and nothing once the build ends.

The index is kept under the variant's description and the size and modification time of
``libtriton.so`` (the compiled files' hash depends on it); an entry whose files are gone, a
Triton whose in-memory caches differ from the form read here, or anything unreadable loads
nothing, and Triton's own lookup does the work as before. A key Triton never computes for a
call is never used. An entry whose hash or function name is not of the form Triton makes
(letters, digits, ``_`` and ``-``; bounded) is left out before Triton's cache manager, which
creates the directory of the hash it is given, sees it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import triton

from kernelpolicy.digest import file_stamps
from kernelpolicy.kernel_cache import BuiltRecord
from kernelpolicy.kernels.sampling_triton.jit import Kernels, names

__all__ = ["entries", "forget", "keep", "library_stamp", "load", "recording"]

FORMAT = 1


def _device() -> int:
    """The device whose caches Triton's launches use now (the current CUDA device)."""
    return int(triton.runtime.driver.active.get_current_device())


def _memory(kernels: Kernels, name: str, device: int) -> dict[str, Any]:
    """Kernel ``name``'s in-memory cache of compiled kernels on ``device`` (Triton's key ->
    ``CompiledKernel``), as ``JITFunction.run`` reads it."""
    return getattr(kernels, name).device_caches[device][0]  # type: ignore[no-any-return]


class _Recording(dict):  # type: ignore[type-arg]  # Triton's own dict of compiled kernels
    """One kernel's in-memory cache of compiled kernels, as Triton's ``JITFunction.run``
    reads it (``get`` by its key), noting the keys a recording thread looks up."""

    def __init__(self, kernel: str, entries: dict[str, Any]) -> None:
        super().__init__(entries)
        self.kernel = kernel

    def get(self, key: Any, default: Any = None) -> Any:
        seen = getattr(_LOCAL, "seen", None)
        if seen is not None:
            seen.add((self.kernel, key))
        return dict.get(self, key, default)


_LOCAL = threading.local()
_SWAP = threading.Lock()
_RECORDING: dict[int, int] = {}  # id(kernels) -> builds recording now


@contextlib.contextmanager
def recording(kernels: Kernels) -> Iterator[set[tuple[str, str]]]:
    """Note the (kernel, key) of every launch this thread makes in the body, on the current
    device: what a variant's build uses, shared kernels included (a kernel an earlier variant
    compiled is found in memory, not compiled again). While any build records, each kernel's
    in-memory cache is a noting dict (a lookup then costs about 0.5 us more on the 2-core
    machine); after the last one it is a plain dict again."""
    device = _device()
    with _SWAP:
        if not _RECORDING.get(id(kernels)):
            _swap(kernels, device, _Recording)
        _RECORDING[id(kernels)] = _RECORDING.get(id(kernels), 0) + 1
    seen: set[tuple[str, str]] = set()
    outer = getattr(_LOCAL, "seen", None)
    _LOCAL.seen = seen
    try:
        yield seen
    finally:
        _LOCAL.seen = outer
        with _SWAP:
            _RECORDING[id(kernels)] -= 1
            if not _RECORDING[id(kernels)]:
                del _RECORDING[id(kernels)]
                _swap(kernels, device, lambda name, entries: dict(entries))


def _swap(kernels: Kernels, device: int, make: Any) -> None:
    """Replace each kernel's in-memory cache on ``device`` by ``make(name, its entries)`` (an
    entry a launch adds to the old one between the copy and the swap is looked up again)."""
    for name in names():
        caches = getattr(kernels, name).device_caches
        current = caches[device]
        caches[device] = (make(name, current[0]), *current[1:])


def entries(kernels: Kernels, used: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """The compiled kernels of ``used`` (from :func:`recording`): one entry each, with what
    Triton's launcher is made from (the source's signature and constants); a kernel whose
    constants are not plain values is left out (Triton looks it up itself)."""
    device = _device()
    found = []
    for name, key in sorted(used):
        compiled = _memory(kernels, name, device).get(key)
        if compiled is None:
            continue
        constants = [[list(k), v] for k, v in getattr(compiled.src, "constants", {}).items()]
        entry = {
            "kernel": name, "key": key, "hash": compiled.hash, "function": compiled.name,
            "signature": dict(getattr(compiled.src, "signature", {})), "constants": constants,
        }  # fmt: skip
        if _plain(entry):
            found.append(entry)
    return found


def _plain(value: Any) -> bool:
    """Whether ``value`` is made of JSON's values only (and reads back as itself)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(item) for item in value)
    return value is None or isinstance(value, bool | int | float | str)


@functools.cache
def library_stamp() -> str:
    """``libtriton``'s size and modification time (the files' hashes depend on it)."""
    folder = Path(triton.__file__).parent / "_C"
    return file_stamps(folder, sorted(folder.glob("libtriton*")))


def _key(description: str) -> str:
    return f"{description}\0preload {FORMAT}\0{library_stamp()}"


def keep(record: BuiltRecord, description: str, entries: list[dict[str, Any]]) -> None:
    """Write the variant's index; a cache that cannot be written keeps none (quiet)."""
    if not entries:
        return
    try:
        record.write_index(_key(description), json.dumps(entries).encode())
    except Exception:  # a cache of root's read by a user, a full disk: no index, as before
        return


_HASH = re.compile(r"[0-9A-Za-z_-]{1,128}")  # Triton's: 64 hex digits, or base32 of them
_FUNCTION = re.compile(r"[A-Za-z_][0-9A-Za-z_]{0,255}")  # a kernel's name, as Python's


def _named_safely(entry: dict[str, Any]) -> bool:
    """Whether an entry's hash and function name are what Triton makes, so that its cache
    manager (which creates the directory it is given) and the group's file name stay inside
    Triton's cache: no separator, no ``..``, bounded."""
    hash_, function = entry.get("hash"), entry.get("function")
    return (
        isinstance(hash_, str)
        and _HASH.fullmatch(hash_) is not None
        and isinstance(function, str)
        and _FUNCTION.fullmatch(function) is not None
    )


def load(record: BuiltRecord, description: str, kernels: Kernels) -> list[tuple[str, str]]:
    """Put the variant's kept kernels into the kernels' in-memory caches on the current
    device; returns the (kernel, key) of each (none: none kept, or none usable: Triton looks
    them up itself)."""
    loaded: list[tuple[str, str]] = []
    try:
        data = record.read_index(_key(description))
        entries = json.loads(data) if data is not None else []
        from triton.compiler.compiler import ASTSource, CompiledKernel
        from triton.runtime.cache import get_cache_manager

        device = _device()
        for entry in entries:
            if not _named_safely(entry):
                continue  # Triton's own lookup finds it, if it is anything
            memory = _memory(kernels, entry["kernel"], device)
            if entry["key"] in memory:
                continue
            group = get_cache_manager(entry["hash"]).get_group(f"{entry['function']}.json")
            if not group:
                continue  # its files are gone: Triton compiles or finds it itself
            constants = {tuple(k): v for k, v in entry["constants"]}
            source = ASTSource(getattr(kernels, entry["kernel"]), entry["signature"], constants)
            memory[entry["key"]] = CompiledKernel(source, group, entry["hash"])
            loaded.append((entry["kernel"], entry["key"]))
    except Exception:  # another Triton's form, a damaged index: Triton's own lookup
        forget(kernels, loaded)
        return []
    return loaded


def forget(kernels: Kernels, loaded: list[tuple[str, str]]) -> None:
    """Take out what :func:`load` put in (a call that failed with them: Triton's lookup)."""
    device = _device()
    for name, key in loaded:
        _memory(kernels, name, device).pop(key, None)
