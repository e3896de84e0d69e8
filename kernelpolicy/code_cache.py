"""Python code kernelpolicy compiles at start-up, compiled once per node.

Two kinds of source text are compiled in every process, and Python keeps bytecode for modules,
not for them: the methods ``@dataclass`` writes for each class (``__init__``, ``__repr__``,
``__eq__``, ``__hash__``, frozen ``__setattr__``/``__delattr__``; about 0.5 ms a class, 18 ms
of the 36 classes a first ``resolve()`` makes, 40% of it on the 2-core machine) and the
``select``/``gate`` functions generated from the policies (:mod:`kernelpolicy.engine.hotpath`,
4-8 ms). Inside :func:`code_cached` (``resolve()``, the package's lazy imports, the CLI's
parsing), the ``exec`` that :mod:`dataclasses` calls for a text of a ``kernelpolicy`` module,
and :func:`compile_kept`, use the code object an earlier process compiled from the same text,
kept (keyed by the file name and the whole text) in ``<cache dir>/code/<tag>.marshal`` (a file
per interpreter build and kernelpolicy version), which a process that compiled new ones
rewrites when its last holder leaves. The same text
compiled with the same flags is the same code, so what is made is exactly what it would be
without the cache; text of any other module is compiled as :mod:`dataclasses` would. The same
file keeps texts derived only from what their key names (:func:`keep_text`): the Python
translations of the policies' CEL rules, verified against CEL once per node
(:mod:`kernelpolicy.engine.rules`; a later process loads no CEL extension for them).

A code object is code: the file is used only under the compiled-pack cache's rules (it and its
directory belong to this user or root and no one else can write them, a regular file and not a
link, within ``MAX_CODE_CACHE_BYTES``, naming this interpreter's exact build), and anything
wrong with it is a miss. ``KERNELPOLICY_PACK_CACHE=0`` turns it off with the other validated
caches; a relative cache directory, or one that ``KERNELPOLICY_CACHE_DIR`` names and that does
not exist, is no cache. The hook on :mod:`dataclasses` is in place only while a holder is
inside, and only where it compiles with ``exec`` and no one else has replaced it.
"""

from __future__ import annotations
import __future__

import builtins
import contextlib
import dataclasses
import itertools
import marshal
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import CodeType
from typing import Any

from kernelpolicy.cache_dir import default_cache_dir
from kernelpolicy.limits import MAX_CODE_CACHE_BYTES, MAX_CODE_CACHE_ENTRIES

__all__ = [
    "PLACE_VARIABLES",
    "CodeCache",
    "cache_place",
    "code_cached",
    "compile_kept",
    "keep_text",
    "kept_text",
    "process_cache",
]

FORMAT = 1
CODE_FILES = 4
"""Files kept in ``<cache dir>/code`` (the newest): one per interpreter and kernelpolicy version."""
_SUFFIX = ".marshal"
_MODULE_PREFIX = "kernelpolicy."
_DATACLASS_FILE = "<string>"  # what exec() names the code of a text
_TEXT = "text\0"  # the keys of kept texts (a compiled text's key starts with its file name)


def _file_tag() -> str:
    """This interpreter's exact build (marshal's format and the bytecode belong to it) and
    kernelpolicy's installation, as the stamp of the file that holds its version (an upgrade
    starts a file of its own instead of keeping the texts of the old code; :data:`CODE_FILES`
    are kept). Nothing here makes a class: the place is known before the first one."""
    from kernelpolicy.digest import file_stamps, sha256

    package = Path(__file__).resolve().parent
    installed = file_stamps(package, [package / "versions.py"])
    text = f"{FORMAT}\0{sys.implementation.cache_tag}\0{sys.version}\0{sys.hexversion}\0{installed}"
    return sha256(text.encode()).hexdigest()[:32]


def _header(tag: str) -> bytes:
    return f"kernelpolicy compiled code {tag}\n".encode()


def _compiles_alike() -> bool:
    """Whether compiling here, without inherited flags, compiles as :mod:`dataclasses`'s own
    ``exec`` does: it calls ``exec`` by name, and imports no ``__future__`` feature."""
    namespace = vars(dataclasses)
    return "exec" not in namespace and not any(
        isinstance(value, __future__._Feature) for value in namespace.values()
    )


class CodeCache:
    """The process's kept code objects, and who holds the hook: the one owner of both.

    Attributes:
        compiled: Texts compiled in this process (misses).
        reused: Texts whose kept code was used (hits).
    """

    def __init__(self, place: Path | None) -> None:
        self.place = place
        self.lock = threading.Lock()
        self.holders = 0
        self.hooked = False
        self.loaded = False
        self.codes: dict[str, CodeType | str] = {}
        self.used: set[str] = set()
        self.compiled = 0
        self.reused = 0
        self._unsaved = False

    def enter(self) -> None:
        with self.lock:
            if self.holders == 0 and self.place is not None:
                if not self.loaded:
                    self.codes = _read(self.place)
                    self.loaded = True
                if _compiles_alike():
                    dataclasses.exec = self.exec  # type: ignore[attr-defined]
                    self.hooked = True
            self.holders += 1

    def leave(self) -> None:
        with self.lock:
            self.holders -= 1
            if self.holders > 0:
                return
            if self.hooked and vars(dataclasses).get("exec") == self.exec:
                del dataclasses.exec  # type: ignore[attr-defined]
            self.hooked = False
            if self._unsaved and self.place is not None:
                self._unsaved = False
                _write(self.place, self._kept())

    def compile(self, source: str, filename: str) -> CodeType:
        """``compile(source, filename, "exec")`` without inherited flags, from the kept code
        while a holder is inside."""
        key = f"{filename}\0{source}"
        if self.holders > 0 and self.place is not None:
            kept = self.codes.get(key)
            if type(kept) is CodeType:
                self.reused += 1
                self.used.add(key)
                return kept
        code = compile(source, filename, "exec", dont_inherit=True)
        if self.holders > 0 and self.place is not None:
            with self.lock:
                self.codes[key] = code
                self.used.add(key)
                self._unsaved = True
                self.compiled += 1
        return code

    def text(self, key: str) -> str | None:
        """The text kept under ``key`` by an earlier process (while a holder is inside)."""
        if self.holders == 0 or self.place is None:
            return None
        kept = self.codes.get(_TEXT + key)
        if type(kept) is not str:
            return None
        self.reused += 1
        self.used.add(_TEXT + key)
        return kept

    def keep_text(self, key: str, value: str) -> None:
        """Keep ``value`` under ``key`` for later processes (while a holder is inside): a
        result derived only from what ``key`` names, such as a verified translation."""
        if self.holders == 0 or self.place is None:
            return
        with self.lock:
            self.codes[_TEXT + key] = value
            self.used.add(_TEXT + key)
            self._unsaved = True
            self.compiled += 1

    def exec(self, source: Any, globals: dict[str, Any] | None = None, locals: Any = None) -> None:
        """``exec`` as :mod:`dataclasses` calls it: the text of one of kernelpolicy's modules
        from the kept code; any other compiled as dataclasses' own ``exec`` would (without this
        module's ``__future__`` flags)."""
        if not isinstance(source, str):
            return builtins.exec(source, globals, locals)
        if _ours(globals):
            code = self.compile(source, _DATACLASS_FILE)
        else:
            code = compile(source, _DATACLASS_FILE, "exec", dont_inherit=True)
        return builtins.exec(code, globals, locals)

    def _kept(self) -> dict[str, CodeType | str]:
        """What to write: everything, unless that is over ``MAX_CODE_CACHE_ENTRIES`` (other
        packs, edited code), then what this process used (at most that many)."""
        if len(self.codes) <= MAX_CODE_CACHE_ENTRIES:
            return self.codes
        used = (key for key in self.codes if key in self.used)
        return {key: self.codes[key] for key in itertools.islice(used, MAX_CODE_CACHE_ENTRIES)}


def _ours(globals: Mapping[str, Any] | None) -> bool:
    return isinstance(globals, dict) and str(globals.get("__name__", "")).startswith(_MODULE_PREFIX)


PLACE_VARIABLES = ("KERNELPOLICY_PACK_CACHE", "KERNELPOLICY_CACHE_DIR")
"""The settings that move or switch off the cache: only where one is set are the settings'
readers imported (they make classes of their own, whose methods this cache keeps)."""


def cache_place(environ: Mapping[str, str]) -> Path | None:
    """The cache file for the variables ``environ``, or None where there is no cache (see
    :func:`kernelpolicy.settings.readers.validated_cache_dir`)."""
    if any(name in environ for name in PLACE_VARIABLES):
        from kernelpolicy.settings.readers import validated_cache_dir

        base = validated_cache_dir(environ, create=False)
    else:  # the default place, as validated_cache_dir gives it
        base = default_cache_dir()
        base = base if base.is_absolute() else None
    return None if base is None else base / "code" / f"{_file_tag()}{_SUFFIX}"


def _read(path: Path) -> dict[str, CodeType | str]:
    """The kept code objects at ``path``; none where the file may not be trusted or read."""
    from kernelpolicy.safeio import read_trusted_cache_bytes

    data = read_trusted_cache_bytes(
        path, limit=MAX_CODE_CACHE_BYTES, limit_name="MAX_CODE_CACHE_BYTES"
    )
    header = _header(path.stem)
    if data is None or not data.startswith(header):
        return {}
    try:
        codes = marshal.loads(data[len(header) :])
    except Exception:  # truncated or another interpreter's: a miss
        return {}
    if not isinstance(codes, dict) or len(codes) > MAX_CODE_CACHE_ENTRIES:
        return {}
    for key, value in codes.items():
        if type(key) is not str or type(value) is not (str if key.startswith(_TEXT) else CodeType):
            return {}
    return codes


def _write(path: Path, codes: Mapping[str, CodeType | str]) -> None:
    """Keep ``codes`` at ``path``; a cache that cannot be written is no cache."""
    from kernelpolicy.safeio import store_cache_bytes

    try:
        data = _header(path.stem) + marshal.dumps(dict(codes))
    except ValueError:
        return
    store_cache_bytes(
        path, data, limit=MAX_CODE_CACHE_BYTES, keep=CODE_FILES, what="compiled code cache",
        suffix=_SUFFIX,
    )  # fmt: skip


_PROCESS: dict[str, CodeCache] = {}  # the process's cache, made on first use
_PROCESS_LOCK = threading.Lock()


def process_cache() -> CodeCache:
    """The process's cache, its place read from ``os.environ`` on the first call."""
    with _PROCESS_LOCK:
        if "cache" not in _PROCESS:
            _PROCESS["cache"] = CodeCache(cache_place(os.environ))
        return _PROCESS["cache"]


def compile_kept(source: str, filename: str) -> CodeType:
    """``compile(source, filename, "exec")`` (no inherited ``__future__`` flags), from the
    code an earlier process kept while the process's cache is held (:func:`code_cached`)."""
    return process_cache().compile(source, filename)


def kept_text(key: str) -> str | None:
    """A text an earlier process kept under ``key`` (:meth:`CodeCache.text`), while the
    process's cache is held; None otherwise."""
    return process_cache().text(key)


def keep_text(key: str, value: str) -> None:
    """Keep ``value`` under ``key`` for the node's later processes (:meth:`CodeCache.keep_text`)."""
    process_cache().keep_text(key, value)


@contextlib.contextmanager
def code_cached(cache: CodeCache | None = None) -> Iterator[CodeCache]:
    """Run the body with kernelpolicy's start-up code compiled at most once per node.

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
