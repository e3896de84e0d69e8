"""Loading an implementation's callable: accelerated implementations kernelpolicy ships
(Triton, FlashInfer, aiter) are imported on their first call, not by ``impl()``
(:class:`LazyEntry`): ``impl()`` only checks that their libraries are installed."""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Callable
from typing import Any

from kernelpolicy.errors import ResolutionError
from kernelpolicy.gcpause import collector_paused
from kernelpolicy.kernels.builds import start_thread
from kernelpolicy.policy.entries import load_entry, load_prepared


class EntryUnloadable(ResolutionError):
    """An implementation imported on its first call could not be imported or prepared."""


class LazyEntry:
    """An accelerated implementation's callable, imported on its first call (or :meth:`load`),
    not when ``impl()`` hands it out: ``impl()`` only checks that ``requires`` (the libraries it
    imports) are installed. A kernel with a serving form (``nonblocking_form``) is served by
    that form, and its library is imported by its background build, not here.

    Raises (on the first call):
        EntryUnloadable: the import, or the preparation, failed.
    """

    def __init__(
        self,
        entry: str,
        prepare: str | None,
        requires: tuple[str, ...],
        on_load: Callable[[Callable[..., Any]], None],
    ) -> None:
        missing = [name for name in requires if not installed(name)]
        if missing:
            raise ResolutionError(  # the caller says which entry it could not load
                f"cannot import {missing[0]}: "
                f"ModuleNotFoundError: No module named {missing[0].partition('.')[0]!r}"
            )
        self.entry = entry
        self._prepare = prepare
        self._on_load = on_load
        self._function: Callable[..., Any] | None = None
        self._lock = threading.Lock()

    def prefetch(self) -> None:
        """Import the implementation on a background thread now, so that its first call finds
        it imported (and its library's per-process set-up done: a kernel's ``prefetch``
        attribute, such as Triton's hash of its own installation). ``impl()`` returns at once;
        a failure is left for the first call to meet and report, as without a prefetch."""

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
            if self._function is None:
                self._function = self._import()
            return self._function

    def _import(self) -> Callable[..., Any]:
        try:
            with collector_paused():  # an import in a worker's large heap: kernelpolicy.gcpause
                prepared = load_prepared(self.entry, self._prepare)
        except Exception as exc:  # import errors, missing CUDA/ROCm runtimes, build errors
            raise EntryUnloadable(f"cannot load {self.entry}: {exc}") from exc
        self._on_load(prepared.function)
        return prepared.served

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return (self._function or self.load())(*args, **kwargs)

    def __repr__(self) -> str:
        state = "loaded" if self._function is not None else "not imported yet"
        return f"LazyEntry({self.entry}: {state})"


def installed(name: str) -> bool:
    """Whether the top-level package of ``name`` can be imported (found, not imported)."""
    top = name.partition(".")[0]
    if top in sys.modules:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False
