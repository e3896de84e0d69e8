"""Loading an implementation's callable: accelerated implementations kernelpolicy ships
(Triton, FlashInfer, aiter) are imported on their first call, not by ``impl()``
(:class:`LazyEntry`): ``impl()`` only checks that their libraries are installed."""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from kernelpolicy.errors import ResolutionError
from kernelpolicy.gcpause import collector_paused
from kernelpolicy.kernels.build_threads import start_thread
from kernelpolicy.kernels.builds import Compiling, Done
from kernelpolicy.policy.entries import load_entry, load_prepared

EXTRA_HINTS = {
    "torch": " (kernelpolicy's kernels run on torch, an optional extra: pip install "
    "'kernelpolicy[torch]', or the torch build for your GPU first)",
}
"""What to install for a library an implementation requires, said where it is missing."""


class EntryUnloadable(ResolutionError):
    """An implementation imported on its first call could not be imported or prepared."""


class Importing(Compiling):
    """An implementation imported on its first call is importing on another thread (``impl()``'s
    prefetch): serve this call elsewhere; later calls run it once imported.

    Attributes:
        entry: The :class:`LazyEntry` importing (``entry.load()`` waits for it).
    """

    doing = "importing"
    did = "imported"

    def __init__(self, entry: LazyEntry) -> None:
        super().__init__(entry.entry, entry.entry, entry.watch)
        self.entry = entry


class LazyEntry:
    """An accelerated implementation's callable, imported on its first call (or :meth:`load`),
    not when ``impl()`` hands it out: ``impl()`` only checks that ``requires`` (the libraries it
    imports) are installed. A kernel with a serving form (``nonblocking_form``) is served by
    that form, and its library is imported by its background build, not here.

    A ``nonblocking`` entry called while another thread imports it (the prefetch) does not
    wait: it raises :class:`Importing`, and the engine serves that call with the next candidate,
    as it does a variant that is compiling.

    Raises (on the first call):
        EntryUnloadable: the import, or the preparation, failed.
        Importing: a nonblocking entry is importing on another thread.
    """

    def __init__(
        self,
        entry: str,
        prepare: str | None,
        requires: tuple[str, ...],
        on_load: Callable[[Callable[..., Any]], None],
        *,
        nonblocking: bool = False,
    ) -> None:
        missing = [name for name in requires if not installed(name)]
        if missing:
            top = missing[0].partition(".")[0]
            hint = EXTRA_HINTS.get(top, "")
            raise ResolutionError(  # the caller says which entry it could not load
                f"cannot import {missing[0]}: ModuleNotFoundError: No module named {top!r}{hint}"
            )
        self.entry = entry
        self._prepare = prepare
        self._on_load = on_load
        self._function: Callable[..., Any] | None = None
        self._nonblocking = nonblocking
        self._lock = threading.Lock()  # held through the import
        self._state = threading.Lock()  # guards _importing and _told (never held long)
        self._importing = False
        self._importer = 0  # the thread that imports, while _importing
        self._told: list[Done] = []  # told when the import in flight ends
        _ENTRIES.add(self)

    def prefetch(self) -> None:
        """Import the implementation on a background thread now, so that its first call finds
        it imported (and its library's per-process set-up done: a kernel's ``prefetch``
        attribute, such as Triton's hash of its own installation). ``impl()`` returns at once;
        a failure is left for the first call to meet and report, as without a prefetch. The
        thread hands the interpreter back often (``start_thread``, :mod:`kernelpolicy.yielding`)."""

        def run() -> None:
            try:
                self.load()
                warm = getattr(load_entry(self.entry), "prefetch", None)  # imported: a lookup
                if callable(warm):
                    warm()
            except Exception:  # any import failure: the first call imports again, reports it
                return

        start_thread(run, f"kernelpolicy-import {self.entry}")

    def load(self) -> Callable[..., Any]:
        """Import the implementation now (a warm step), once; returns what serves its calls."""
        function = self._function
        if function is not None:
            return function
        with self._lock:
            return self._load_held()

    def _load_held(self) -> Callable[..., Any]:
        """Import under ``_lock``, once; tell who watches how it ended."""
        if self._function is not None:
            return self._function
        with self._state:
            self._importing, self._importer = True, threading.get_ident()
        why: str | None = "the import did not end"
        try:
            self._function = self._import()
            why = None
        except EntryUnloadable as exc:
            why = str(exc)
            raise
        finally:
            with self._state:
                self._importing = False
                told, self._told = self._told, []
            for done in told:
                try:
                    done(why)
                except Exception:  # a listener's failure (its logging) must not fail the call
                    continue
        return self._function

    def watch(self, done: Done) -> None:
        """Call ``done`` once the import in flight ends (at once if none is), with None when it
        succeeded, else why it failed."""
        with self._state:
            if self._importing:
                self._told.append(done)
                return
        done(None if self._function is not None else "not imported")

    def _import(self) -> Callable[..., Any]:
        try:
            with collector_paused():  # an import in a worker's large heap: kernelpolicy.gcpause
                prepared = load_prepared(self.entry, self._prepare)
        except Exception as exc:  # import errors, missing CUDA/ROCm runtimes, build errors
            raise EntryUnloadable(f"cannot load {self.entry}: {exc}") from exc
        self._on_load(prepared.function)
        return prepared.served

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        function = self._function
        if function is None:
            function = self._load_now()
        return function(*args, **kwargs)

    def _load_now(self) -> Callable[..., Any]:
        """Import in this thread, unless another thread is importing: a nonblocking entry
        raises :class:`Importing` then, a blocking one waits."""
        if not self._nonblocking:
            return self.load()
        if not self._lock.acquire(blocking=False):
            raise Importing(self)
        try:
            return self._load_held()
        finally:
            self._lock.release()

    def __repr__(self) -> str:
        state = "loaded" if self._function is not None else "not imported yet"
        return f"LazyEntry({self.entry}: {state})"

    def _after_fork_in_child(self) -> int | None:
        """Fresh locks in the child of a fork, unless this thread, which forked, was importing:
        an import in flight on another thread (which the child has not) is dropped, and the
        child's first call imports again. Returns that thread's ident."""
        me = threading.get_ident()
        if self._importing and self._importer == me:
            return None
        gone = self._importer if self._importing else None
        self._lock, self._state = threading.Lock(), threading.Lock()
        self._importing, self._told = False, []
        return gone


_ENTRIES: weakref.WeakSet[LazyEntry] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """The child of a fork has only the thread that forked: the imports other threads were
    running (``impl()``'s prefetch) never end there, and would hold their locks for ever."""
    gone = {ident for entry in list(_ENTRIES) if (ident := entry._after_fork_in_child())}
    if gone:
        _drop_module_locks(gone)


def _drop_module_locks(gone: set[int]) -> None:
    """Forget the import locks that the threads ``gone`` held, with their half-imported
    modules, so that an import in the child starts afresh (CPython keeps them in
    ``importlib._bootstrap._module_locks``; where that differs, nothing is dropped)."""
    import importlib._bootstrap as bootstrap

    locks = getattr(bootstrap, "_module_locks", None)
    if not isinstance(locks, dict):
        return
    for name, ref in list(locks.items()):
        lock = ref() if callable(ref) else ref
        if getattr(lock, "owner", None) in gone:
            del locks[name]
            module = sys.modules.get(name)
            if getattr(getattr(module, "__spec__", None), "_initializing", False):
                del sys.modules[name]


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def installed(name: str) -> bool:
    """Whether the top-level package of ``name`` can be imported (found, not imported)."""
    top = name.partition(".")[0]
    if top in sys.modules:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False
