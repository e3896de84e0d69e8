"""The node's kernel cache as this process's builds see it: looked for once, never on a call.

Looking for the cache (``kernel_cache.record_in_use``) walks it whole (up to
``MAX_KERNEL_CACHE_ENTRIES`` entries, over a second for a large one), so a call's path
(:meth:`~kernelpolicy.kernels.builds.Builds.require`, inside :func:`on_call_path`) that finds it
not looked for yet gets :class:`NotLookedFor` instead of waiting: a background build, or the
sampler's prefetch at ``impl()``, makes the look.

Pure Python: importing this module imports neither torch nor a kernel library.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelpolicy.kernel_cache import BuiltRecord

__all__ = ["NotLookedFor", "forget_kernel_cache", "kernel_cache", "on_call_path"]


@dataclasses.dataclass
class _CacheLookup:
    """The kernel cache this process uses, looked for once (``done``) until forgotten."""

    done: bool = False
    record: BuiltRecord | None = None


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

            record, problem = record_in_use(os.environ)
            if problem is not None:
                print(f"kernelpolicy: warning: kernel cache not used: {problem}", file=sys.stderr)
            _CACHE.record, _CACHE.done = record, True
        return _CACHE.record


def forget_kernel_cache() -> None:
    """Look for the kernel cache again on next use (tests, ``verify``; a worker finds it once)."""
    with _CACHE_LOCK:
        _CACHE.record, _CACHE.done = None, False
