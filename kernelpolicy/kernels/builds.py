"""Kernel variants built in the background: no call waits on a compiler.

A kernel that compiles per variant (the Triton sampler per dtype, path and vocabulary;
FlashInfer's JIT per function and dtype) keeps a :class:`Builds`. Its serving form calls
:meth:`Builds.require` with the variant a call needs: a built variant returns at once (one set
lookup); an unbuilt one starts its build in a background thread and raises :class:`Compiling`,
so that the caller (the engine: ``kernelpolicy.engine.runtime``) serves that call with the next
ready candidate while the variant builds; later calls find it built and switch to it. A build
that fails makes every later call of its variant raise :class:`BuildFailed`, which the engine
treats as any call-time failure: that variant goes to its fallback for the process.

A kernel module exposes its serving form as the ``nonblocking`` attribute of its entry point
(:func:`nonblocking_form`); direct calls of the entry point keep building inline, as before.
:meth:`Builds.warm` builds a list of variants now (a node's warm step, ``verify``); the kernels
say which variants exist (``sampling_triton.variants``, ``adapters.flashinfer_variants``).

Pure Python: importing this module imports neither torch nor a kernel library.
"""

from __future__ import annotations

import atexit
import dataclasses
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)

Done = Callable[[str | None], None]
"""Told when a build ends: None when it succeeded, else why it failed."""


class Compiling(Exception):
    """The variant a call needs is being built in the background: serve the call elsewhere.

    Attributes:
        what: The variant, in words ("bfloat16 top-k, vocab 128256").
        kernel: The kernel family's name ("triton sampler").
    """

    def __init__(self, kernel: str, what: str, watch: Callable[[Done], None]) -> None:
        super().__init__(f"{kernel}: {what} is compiling in the background")
        self.kernel = kernel
        self.what = what
        self._watch = watch

    def when_built(self, done: Done) -> None:
        """Call ``done`` once the build ends (at once if it has), from the build's thread."""
        self._watch(done)


class BuildFailed(RuntimeError):
    """A variant's build failed in this process; its calls must go to the fallback."""


@dataclasses.dataclass(frozen=True)
class BuildStats:
    """What one kernel family has built, is building and failed to build, and how many calls
    found their variant still building (each served by another implementation)."""

    built: int
    building: int
    failed: int
    served_while_building: int


EXIT_WAIT_SECONDS = 30.0
"""How long a process that exits waits for the builds in flight: torch or a compiler killed in
the middle of a call by the interpreter's shutdown aborts the process ("terminate called
without an active exception"), so an exit lets a short build finish; a longer one is cut."""

_RUNNING: set[threading.Thread] = set()
_RUNNING_LOCK = threading.Lock()
_EXIT_HOOK: list[bool] = []  # registered once per process


def start_thread(run: Callable[[], None], name: str) -> None:
    """Run ``run`` in a daemon thread (a build never keeps the process alive for long: at exit
    it is waited for up to :data:`EXIT_WAIT_SECONDS`)."""

    def tracked() -> None:
        try:
            run()
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(thread)

    thread = threading.Thread(target=tracked, name=name, daemon=True)
    with _RUNNING_LOCK:
        if not _EXIT_HOOK:
            atexit.register(_wait_at_exit)
            _EXIT_HOOK.append(True)
        _RUNNING.add(thread)
    thread.start()


def _wait_at_exit() -> None:
    deadline = time.monotonic() + EXIT_WAIT_SECONDS
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for thread in running:
        thread.join(max(0.0, deadline - time.monotonic()))


_ALL: weakref.WeakValueDictionary[str, Builds[Any]] = weakref.WeakValueDictionary()


def stats() -> dict[str, BuildStats]:
    """Every live kernel family's :class:`BuildStats`, by name (a worker's metrics read it)."""
    return {name: builds.stats() for name, builds in list(_ALL.items())}


def nonblocking_form(function: Callable[..., Any]) -> Callable[..., Any] | None:
    """The serving form of a kernel entry point (raises :class:`Compiling` rather than build
    inline), or None for a kernel that has none."""
    form = getattr(function, "nonblocking", None)
    return form if callable(form) else None


class Builds(Generic[K]):
    """The variants of one kernel family: built, building (with who waits), failed.

    Args:
        name: The family's name, in notes and :func:`stats` (one live family per name).
        build: Builds one variant (compiles it; raises on failure). Called in a background
            thread by :meth:`require`, in the caller's by :meth:`warm`.
        describe: A variant in words, for notes.
        start: Runs a build in the background (``start_thread``; tests may run it inline).
    """

    def __init__(
        self,
        name: str,
        build: Callable[[K], None],
        *,
        describe: Callable[[K], str] = str,
        start: Callable[[Callable[[], None], str], None] = start_thread,
    ) -> None:
        self.name = name
        self.build = build
        self.describe = describe
        self._start = start
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)  # a build ended
        self._ready: set[K] = set()  # read without the lock: the hot path
        self._failed: dict[K, str] = {}
        self._building: dict[K, list[Done]] = {}  # variant -> told when it ends
        self._waiting = 0
        _ALL[name] = self

    def ready(self, key: K) -> bool:
        """Whether ``key`` is built."""
        return key in self._ready

    def require(self, key: K) -> None:
        """Return when ``key`` is built; else start its build (once) and raise.

        Raises:
            Compiling: ``key`` is building now; the call must be served elsewhere.
            BuildFailed: ``key`` failed to build in this process.
        """
        if key in self._ready:
            return
        with self._lock:
            starting = key not in self._ready and key not in self._failed
            starting = starting and key not in self._building
            if starting:
                self._building[key] = []
        if starting:  # outside the lock: a build run inline (tests) takes it
            self._start(lambda: self._run(key), f"kernelpolicy build: {self.name}")
        with self._lock:
            if key in self._ready:
                return
            why = self._failed.get(key)
            if why is None:
                self._waiting += 1
        if why is not None:
            raise BuildFailed(f"{self.name}: {self.describe(key)} failed to build: {why}")
        raise Compiling(self.name, self.describe(key), lambda done: self._watch(key, done))

    def mark_built(self, key: K) -> None:
        """Record ``key`` as built (a blocking call ran it)."""
        with self._lock:
            self._ready.add(key)

    def warm(self, keys: Iterable[K]) -> dict[K, str]:
        """Build each of ``keys`` not built yet, now, in this thread.

        Returns:
            The variants that failed to build, with why (they stay failed: their calls go to
            the fallback).
        """
        failed = {}
        for key in keys:
            if key not in self._ready and key not in self._failed:
                self._run(key)
            if key in self._failed:
                failed[key] = self._failed[key]
        return failed

    def wait(self, key: K, timeout: float | None = None) -> bool:
        """Wait until ``key`` is not building (built, failed, or never started); returns
        False when ``timeout`` passed first."""
        with self._ended:
            return self._ended.wait_for(lambda: key not in self._building, timeout)

    def stats(self) -> BuildStats:
        with self._lock:
            return BuildStats(
                built=len(self._ready),
                building=len(self._building),
                failed=len(self._failed),
                served_while_building=self._waiting,
            )

    def _watch(self, key: K, done: Done) -> None:
        with self._lock:
            waiting = self._building.get(key)
            if waiting is not None:
                waiting.append(done)
                return
            outcome = self._failed.get(key)
        done(outcome)

    def _run(self, key: K) -> None:
        why: str | None = None
        try:
            self.build(key)
        except Exception as exc:  # the compiler's error: this variant's calls fall back
            why = f"{type(exc).__name__}: {str(exc)[:300]}"
        with self._lock:
            if why is None:
                self._ready.add(key)
            else:
                self._failed[key] = why
            told = self._building.pop(key, [])
            self._ended.notify_all()
        for done in told:
            try:
                done(why)
            except Exception:  # a listener's failure (its logging) must not end the build's
                continue  # thread before the others hear
