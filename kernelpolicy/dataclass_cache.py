"""The methods :mod:`dataclasses` writes for kernelpolicy's classes, compiled once per node.

``@dataclass`` writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` and
frozen ``__setattr__``/``__delattr__`` as source text and compiles it with ``exec`` when the
class is made, in every process: about 0.5 ms a class, 18 ms of the 36 classes a first
``resolve()`` makes (40% of it on the 2-core machine; ``benchmarks/README.md``). Python keeps
bytecode for modules, not for this text. Inside :func:`methods_cached` (``resolve()`` and the
package's lazy imports), the ``exec`` that :mod:`dataclasses` calls compiles a text of a
``kernelpolicy`` module only once per node: its code object is kept, keyed by the whole text,
in ``<cache dir>/methods/<interpreter>.marshal`` (written when a process compiled new ones).
The same text compiled with the same flags is the same code, so a class is exactly what it
would be without the cache; text of any other module is compiled as before.

A code object is code: the file is used only under the compiled-pack cache's rules (it and its
directory belong to this user or root and no one else can write them, a regular file and not
a link, within ``MAX_METHOD_CACHE_BYTES``, naming this interpreter's exact build), and anything
wrong with it is a miss. ``KERNELPOLICY_PACK_CACHE=0`` turns it off, as the other validated
caches; a relative cache directory, or one that ``KERNELPOLICY_CACHE_DIR`` names and that does
not exist, is no cache. The hook is in place only while a holder is inside, and only where
:mod:`dataclasses` compiles with ``exec`` and no one else has replaced it.
"""

from __future__ import annotations
import __future__

import builtins
import contextlib
import dataclasses
import marshal
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import CodeType
from typing import Any

from kernelpolicy.limits import MAX_METHOD_CACHE_BYTES, MAX_METHOD_CACHE_ENTRIES

__all__ = ["MethodCache", "cache_place", "methods_cached", "process_cache"]

FORMAT = 1
_MODULE_PREFIX = "kernelpolicy."


def _interpreter_tag() -> str:
    """This interpreter's exact build: marshal's format and the bytecode belong to it."""
    from kernelpolicy.digest import sha256

    text = f"{FORMAT}\0{sys.implementation.cache_tag}\0{sys.version}\0{sys.hexversion}"
    return sha256(text.encode()).hexdigest()[:32]


def _header(tag: str) -> bytes:
    return f"kernelpolicy dataclass methods {tag}\n".encode()


def _compiles_alike() -> bool:
    """Whether compiling here, without inherited flags, compiles as :mod:`dataclasses`'s own
    ``exec`` does: it calls ``exec`` by name, and imports no ``__future__`` feature."""
    namespace = vars(dataclasses)
    return "exec" not in namespace and not any(
        isinstance(value, __future__._Feature) for value in namespace.values()
    )


class MethodCache:
    """The process's compiled dataclass methods, and who holds the hook: one owner.

    Attributes:
        compiled: Texts compiled in this process (misses), kept for the next write.
        reused: Texts whose kept code was used (hits).
    """

    def __init__(self, place: Path | None) -> None:
        self.place = place
        self.lock = threading.Lock()
        self.holders = 0
        self.hooked = False
        self.loaded = False
        self.codes: dict[str, CodeType] = {}
        self.compiled = 0
        self.reused = 0
        self._unsaved = False

    def enter(self) -> None:
        with self.lock:
            if self.holders == 0 and self.place is not None and _compiles_alike():
                if not self.loaded:
                    self.codes = _read(self.place)
                    self.loaded = True
                dataclasses.exec = self.exec  # type: ignore[attr-defined]
                self.hooked = True
            self.holders += 1

    def leave(self) -> None:
        with self.lock:
            self.holders -= 1
            if self.holders > 0 or not self.hooked:
                return
            if vars(dataclasses).get("exec") == self.exec:
                del dataclasses.exec  # type: ignore[attr-defined]
            self.hooked = False
            if self._unsaved and self.place is not None:
                self._unsaved = False
                _write(self.place, self.codes)

    def exec(self, source: Any, globals: dict[str, Any] | None = None, locals: Any = None) -> None:
        """``exec`` as :mod:`dataclasses` calls it, a kept code object standing for a text of
        one of kernelpolicy's modules."""
        if not isinstance(source, str):
            return builtins.exec(source, globals, locals)
        kept = self.codes.get(source) if _ours(globals) else None
        if kept is not None:
            self.reused += 1
            return builtins.exec(kept, globals, locals)
        # Compiled as dataclasses' own exec would: without this module's __future__ flags.
        code = compile(source, "<string>", "exec", dont_inherit=True)
        if _ours(globals):
            with self.lock:
                if len(self.codes) < MAX_METHOD_CACHE_ENTRIES:
                    self.codes[source] = code
                    self._unsaved = True
                self.compiled += 1
        return builtins.exec(code, globals, locals)


def _ours(globals: Mapping[str, Any] | None) -> bool:
    return isinstance(globals, dict) and str(globals.get("__name__", "")).startswith(_MODULE_PREFIX)


def cache_place(environ: Mapping[str, str]) -> Path | None:
    """The cache file for the variables ``environ``, or None where there is no cache (see
    :func:`kernelpolicy.settings.readers.validated_cache_dir`)."""
    from kernelpolicy.settings.readers import validated_cache_dir

    base = validated_cache_dir(environ, create=False)
    return None if base is None else base / "methods" / f"{_interpreter_tag()}.marshal"


def _read(path: Path) -> dict[str, CodeType]:
    """The kept code objects at ``path``; none where the file may not be trusted or read."""
    from kernelpolicy.safeio import read_trusted_cache_bytes

    data = read_trusted_cache_bytes(
        path, limit=MAX_METHOD_CACHE_BYTES, limit_name="MAX_METHOD_CACHE_BYTES"
    )
    header = _header(path.stem)
    if data is None or not data.startswith(header):
        return {}
    try:
        codes = marshal.loads(data[len(header) :])
    except Exception:  # truncated or another interpreter's: a miss
        return {}
    if not isinstance(codes, dict) or len(codes) > MAX_METHOD_CACHE_ENTRIES:
        return {}
    if not all(type(k) is str and type(v) is CodeType for k, v in codes.items()):
        return {}
    return codes


def _write(path: Path, codes: Mapping[str, CodeType]) -> None:
    """Keep ``codes`` at ``path``; a cache that cannot be written is no cache."""
    from kernelpolicy.errors import KernelPolicyError
    from kernelpolicy.safeio import write_atomic
    from kernelpolicy.trust import private_dir

    try:
        data = _header(path.stem) + marshal.dumps(dict(codes))
        if len(data) > MAX_METHOD_CACHE_BYTES:
            return
        private_dir(path.parent, "dataclass method cache")
        write_atomic(path, data, 0o600)
    except (OSError, KernelPolicyError, ValueError):
        return


_PROCESS: dict[str, MethodCache] = {}  # the process's cache, made on first use
_PROCESS_LOCK = threading.Lock()


def process_cache() -> MethodCache:
    """The process's cache, its place read from ``os.environ`` on the first call."""
    with _PROCESS_LOCK:
        if "cache" not in _PROCESS:
            _PROCESS["cache"] = MethodCache(cache_place(os.environ))
        return _PROCESS["cache"]


@contextlib.contextmanager
def methods_cached(cache: MethodCache | None = None) -> Iterator[MethodCache]:
    """Run the body with kernelpolicy's dataclass methods compiled at most once per node.

    Nests and is shared between threads (the hook comes off when the last holder leaves, and
    the new code objects are written then). ``cache``: the process's own by default (its place
    read from ``os.environ`` once).
    """
    cache = cache if cache is not None else process_cache()
    cache.enter()
    try:
        yield cache
    finally:
        cache.leave()
