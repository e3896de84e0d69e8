"""The node's kernel cache as this process's builds see it: looked for once, never on a call.

Looking for the cache (``kernel_cache.record_in_use``) walks it whole (up to
``MAX_KERNEL_CACHE_ENTRIES`` entries, over a second for a large one), so a call's path
(:meth:`~kernelpolicy.kernels.builds.Builds.require`, inside :func:`on_call_path`) that finds it
not looked for yet gets :class:`NotLookedFor` instead of waiting: a background build, or the
sampler's prefetch at ``impl()``, makes the look.

This module owns that state. A worker looks in its own environment (``kernelpolicy exec``
gave it the cache's variables), which is read, never written. A caller that knows the cache
says so for a while instead: ``kernelpolicy verify`` names the record it checked
(:func:`using_kernel_cache`, which also points Triton there through Triton's own setting), a
test the environment to look in (:func:`looking_for_kernel_cache`); each puts the process's
own lookup back when it ends. A build's child process gets its environment as a dict
(``sampling_triton.child.environment``), never through this process's.

Pure Python: importing this module imports neither torch nor a kernel library.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernelpolicy.kernel_cache import BuiltRecord

__all__ = [
    "NotLookedFor",
    "kernel_cache",
    "looking_for_kernel_cache",
    "on_call_path",
    "using_kernel_cache",
]


@dataclasses.dataclass
class _CacheLookup:
    """The kernel cache this process uses, looked for once (``done``) in ``environ`` (None:
    this process's environment)."""

    done: bool = False
    record: BuiltRecord | None = None
    environ: Mapping[str, str] | None = None


_CACHE_LOCK = threading.Lock()
_CACHE = _CacheLookup()  # read and written under _CACHE_LOCK
_CALL_PATH = threading.local()  # .on: this thread is on a call's path (on_call_path)


class NotLookedFor(Exception):
    """:func:`kernel_cache` asked on a call's path before the cache was looked for: that look
    walks the whole cache, so a background thread makes it."""


@contextlib.contextmanager
def on_call_path(on: bool = True) -> Iterator[None]:
    """Within it (``on``), :func:`kernel_cache` raises :class:`NotLookedFor` rather than look."""
    _CALL_PATH.on = on
    try:
        yield
    finally:
        _CALL_PATH.on = False


def kernel_cache() -> BuiltRecord | None:
    """The record of the trusted kernel cache this process's Triton uses
    (``kernel_cache.record_in_use``), found on first use; a cache that is not trusted is
    ignored, and said in one line on stderr, once. None: no kernel cache in use.

    Raises:
        NotLookedFor: asked within :func:`on_call_path` before the first look ended.
    """
    if getattr(_CALL_PATH, "on", False) and not _CACHE.done:  # done: set once, read unlocked
        raise NotLookedFor
    with _CACHE_LOCK:
        if not _CACHE.done:
            from kernelpolicy.kernel_cache import record_in_use

            environ = os.environ if _CACHE.environ is None else _CACHE.environ
            record, problem = record_in_use(environ)
            if problem is not None:
                print(f"kernelpolicy: warning: kernel cache not used: {problem}", file=sys.stderr)
            _CACHE.record, _CACHE.done = record, True
        return _CACHE.record


@contextlib.contextmanager
def using_kernel_cache(record: BuiltRecord | None, *, triton: bool = False) -> Iterator[None]:
    """Within it, :func:`kernel_cache` is ``record`` in every thread, with no look (None: no
    kernel cache); the process's own lookup is put back after.

    Args:
        record: The kernel cache the caller checked (``kernel_cache.cache_problem``).
        triton: Also point this process's Triton at the cache's ``triton`` directory, where
            it compiles and finds kernels (:func:`_triton_cache`; imports Triton). Without it
            Triton keeps the directory it had.
    """
    with _lookup(_CacheLookup(done=True, record=record)):
        if not triton or record is None:
            yield
            return
        from kernelpolicy.kernel_cache import VARIABLES

        with _triton_cache(record.root / VARIABLES["TRITON_CACHE_DIR"]):
            yield


def looking_for_kernel_cache(environ: Mapping[str, str]) -> contextlib.AbstractContextManager[None]:
    """Within it, the kernel cache is looked for again, on first use, as a process whose
    environment is ``environ`` looks for it (a copy is kept); the process's own lookup is put
    back after."""
    return _lookup(_CacheLookup(environ=dict(environ)))


@contextlib.contextmanager
def _lookup(lookup: _CacheLookup) -> Iterator[None]:
    """``lookup`` in place of the process's, which comes back when it ends."""
    with _CACHE_LOCK:
        before = dataclasses.replace(_CACHE)
        _take(lookup)
    try:
        yield
    finally:
        with _CACHE_LOCK:
            _take(before)


def _take(lookup: _CacheLookup) -> None:
    """Copy ``lookup`` into the one :data:`_CACHE` (whose ``done`` is read unlocked)."""
    _CACHE.done, _CACHE.record, _CACHE.environ = lookup.done, lookup.record, lookup.environ


@contextlib.contextmanager
def _triton_cache(directory: Path) -> Iterator[None]:
    """Within it, this process's Triton compiles into and loads from ``directory``: Triton's own
    setting (``triton.knobs.cache.dir``, Triton 3.4 and later), on a copy of its cache settings
    made while ``propagate_env`` is off, so that Triton does not write it into the environment;
    its settings are put back after. Without Triton, or with one that has no such setting (it
    reads the environment only), Triton keeps its own directory."""
    knobs = _triton_knobs()
    if knobs is None:
        yield
        return
    before = knobs.cache
    scoped = before.copy()
    propagate, knobs.propagate_env = knobs.propagate_env, False
    try:
        scoped.dir = str(directory)
    finally:
        knobs.propagate_env = propagate
    knobs.cache = scoped
    try:
        yield
    finally:
        knobs.cache = before


def _triton_knobs() -> Any:
    """``triton.knobs`` where Triton is installed and has settings that can be kept out of the
    environment, else None."""
    try:
        import triton
    except Exception:  # not installed, or a broken install: the suite says so where it matters
        return None
    knobs = getattr(triton, "knobs", None)
    has = knobs is not None and hasattr(knobs, "propagate_env") and hasattr(knobs, "cache")
    return knobs if has else None
