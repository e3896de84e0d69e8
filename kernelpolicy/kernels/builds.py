"""Kernel variants built in the background: no call waits on a compiler.

A kernel that compiles per variant (the Triton sampler per dtype, path and vocabulary;
FlashInfer's JIT per function and dtype) keeps a :class:`Builds`. Its serving form calls
:meth:`Builds.require` with the variant a call needs: a built variant returns at once (one set
lookup); an unbuilt one starts its build in a background thread and raises :class:`Compiling`,
so that the caller (the engine: ``kernelpolicy.engine.dispatch``) serves that call with the next
ready candidate while the variant builds; later calls find it built and switch to it. A build
that fails makes every later call of its variant raise :class:`BuildFailed`, which the engine
treats as any call-time failure: that variant goes to its fallback for the process. So does a
build that dies another way (``SystemExit`` in its thread) or outlasts
:data:`~kernelpolicy.limits.MAX_BUILD_SECONDS` (a hung JIT; counted from its first call, its
wait for a slot included): no variant stays "compiling" for ever. At most
:data:`~kernelpolicy.limits.MAX_RUNNING_BUILDS` background builds run at once in a process
(:class:`Slots`); the others wait their turn, their calls served elsewhere meanwhile. A family
may build a variant in the background another way than in the caller's (``background``: the
Triton sampler compiles it in a child process, then loads it from Triton's cache).

A variant the node's kernel cache already holds (``kernelpolicy warm`` built it there: the
family's :class:`Cached` says so, from the cache's record,
:func:`~kernelpolicy.kernels.cache_lookup.kernel_cache`) is built by
:meth:`Builds.require` in the calling thread instead: that costs a cache read, not a compile, so
the first call runs on the kernel itself rather than on the fallback while a thread loads it.
Looking for the cache the first time walks it whole (up to 100,000 entries, over a second):
a call that finds it not looked for yet raises :class:`Compiling`, and the variant's background
build looks first, then loads the variant from the cache or builds it.
What a process builds with the cache in use is recorded there for the next processes.

A kernel module exposes its serving form as the ``nonblocking`` attribute of its entry point
(:func:`nonblocking_form`); direct calls of the entry point keep building inline, as before.
:meth:`Builds.warm` builds a list of variants now (a node's warm step, ``verify``); the kernels
say which variants exist (``sampling_triton.variants``, ``adapters.flashinfer_variants``).

Pure Python: importing this module imports neither torch nor a kernel library.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, Protocol, TypeVar

from kernelpolicy.gcpause import collector_paused
from kernelpolicy.kernels.build_threads import SLOTS, Slots, start_thread
from kernelpolicy.kernels.cache_lookup import NotLookedFor, on_call_path
from kernelpolicy.limits import MAX_BUILD_SECONDS

__all__ = [
    "BuildFailed",
    "BuildStats",
    "Builds",
    "Cached",
    "Compiling",
    "Done",
    "nonblocking_form",
    "stats",
]

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)

Done = Callable[[str | None], None]
"""Told when a build ends: None when it succeeded, else why it failed."""


class Compiling(Exception):
    """The variant a call needs is being built in the background: serve the call elsewhere.

    Attributes:
        what: The variant, in words ("bfloat16 top-k, vocab 128256").
        kernel: The kernel family's name ("triton sampler").
    """

    doing = "compiling"
    """What the kernel is doing in the background, in notes ("importing" for an import)."""
    did = "built"

    def __init__(self, kernel: str, what: str, watch: Callable[[Done], None]) -> None:
        super().__init__(f"{kernel}: {what} is {self.doing} in the background")
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
    loaded: int = 0
    """Of ``built``: variants found in the kernel cache and loaded in the calling thread."""


class Cached(Protocol[K_contra]):
    """Which variants of a kernel family the node's kernel cache holds, and how to record one
    built with the cache in use (both quiet: a cache that cannot say or be written is a miss)."""

    def has(self, key: K_contra) -> bool: ...

    def add(self, key: K_contra) -> None: ...


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
            thread by :meth:`require` (unless ``background`` is given), in the caller's by
            :meth:`warm` and for a variant the kernel cache holds.
        background: Builds one variant in a background thread where the kernel cache does
            not hold it (default: ``build``): the Triton sampler's compiles it in a child
            process, whose interpreter the compiler holds, then loads it with ``build``.
        describe: A variant in words, for notes.
        start: Runs a build in the background (``start_thread``; tests may run it inline).
        cache: Which variants the kernel cache holds: :meth:`require` builds those in the
            calling thread (a cache read); every variant built here is recorded in it. None:
            every build goes to the background.
        deadline: Seconds a background build may take: past them a call finds its variant
            failed (:data:`~kernelpolicy.limits.MAX_BUILD_SECONDS`).
        clock: Where those seconds are read (``time.monotonic``; tests pass a fake).
        slots: Bounds the background builds running at once (:data:`SLOTS`, the process's).
    """

    def __init__(
        self,
        name: str,
        build: Callable[[K], None],
        *,
        describe: Callable[[K], str] = str,
        start: Callable[[Callable[[], None], str], None] = start_thread,
        cache: Cached[K] | None = None,
        deadline: float = MAX_BUILD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        background: Callable[[K], None] | None = None,
        slots: Slots = SLOTS,
    ) -> None:
        self.name = name
        self.build = build
        self.background = background or build
        self._slots = slots
        self.describe = describe
        self._start = start
        self._cache = cache
        self._loaded = 0
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)  # a build ended
        self._ready: set[K] = set()  # read without the lock: the hot path
        self._failed: dict[K, str] = {}
        self._building: dict[K, list[Done]] = {}  # variant -> told when it ends
        self._began: dict[K, float] = {}  # a background build -> when it started (clock)
        self._deadline = deadline
        self._clock = clock
        self._waiting = 0
        _ALL[name] = self

    def ready(self, key: K) -> bool:
        """Whether ``key`` is built."""
        return key in self._ready

    def require(self, key: K) -> None:
        """Return when ``key`` is built; else build it here when the kernel cache holds it
        (and return), else start its build in the background (once) and raise.

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
        if not starting:
            self._overdue(key)
        cached = self._in_cache(key, call=True) if starting else False
        if cached:  # a cache read: load it in this thread
            with collector_paused():  # loading creates many objects: see kernelpolicy.gcpause
                self._run(key, loading=True)
        elif starting:  # outside the lock: a build run inline (tests) takes it
            with self._lock:
                self._began[key] = self._clock()
            run = self._look_then_run if cached is None else self._in_background
            self._slots.submit(lambda: self._begin(key, run))
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
        """Record ``key`` as built (a blocking call ran it), and in the kernel cache the first
        time."""
        if key in self._ready:  # every direct call says so: the hot path
            return
        with self._lock:
            self._ready.add(key)
        self._record(key)

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
                loaded=self._loaded,
            )

    def _watch(self, key: K, done: Done) -> None:
        with self._lock:
            waiting = self._building.get(key)
            if waiting is not None:
                waiting.append(done)
                return
            outcome = self._failed.get(key)
        done(outcome)

    def _in_cache(self, key: K, *, call: bool = False) -> bool | None:
        """Whether the kernel cache holds ``key``; None where a ``call`` finds the cache not
        looked for yet (the look is the build thread's: :meth:`_look_then_run`)."""
        try:
            with on_call_path(call):
                return self._cache is not None and self._cache.has(key)
        except NotLookedFor:
            return None
        except Exception:  # a cache that cannot say: build in the background, as without one
            return False

    def _begin(self, key: K, run: Callable[[K], None]) -> None:
        """Start ``key``'s background build in the slot it was given (a variant failed past
        its deadline while it waited is not built: the slot passes on)."""

        def in_slot() -> None:
            try:
                if key in self._building:
                    run(key)
            finally:
                self._slots.release()

        try:
            self._start(in_slot, f"kernelpolicy build: {self.name}")
        except Exception as exc:  # no thread to be had: failed, not "compiling" for ever
            self._slots.release()
            self._ended_as(key, f"its build could not start: {type(exc).__name__}: {exc}")

    def _look_then_run(self, key: K) -> None:
        """A build's thread that looks for the kernel cache first: it loads ``key`` from there
        where it holds it, else builds it."""
        if self._in_cache(key):
            with collector_paused():  # loading creates many objects: see kernelpolicy.gcpause
                self._run(key, loading=True)
        else:
            self._in_background(key)

    def _in_background(self, key: K) -> None:
        self._run(key, build=self.background)

    def _record(self, key: K) -> None:
        if self._cache is None:
            return
        try:
            self._cache.add(key)
        except Exception:  # a cache we may not write (root's, read by a worker): not recorded
            return

    def _overdue(self, key: K) -> None:
        """A background build of ``key`` past its deadline is failed now: its calls go to the
        fallback (a build that ends later is not used)."""
        with self._lock:
            began = self._began.get(key)
            if began is None or self._clock() - began <= self._deadline:
                return
        self._ended_as(key, f"did not build within {self._deadline:g} s (MAX_BUILD_SECONDS)")

    def _run(
        self, key: K, *, loading: bool = False, build: Callable[[K], None] | None = None
    ) -> None:
        try:
            (build or self.build)(key)
        except BaseException as exc:  # SystemExit from a JIT helper too: not "building" for ever
            self._ended_as(key, f"{type(exc).__name__}: {str(exc)[:300]}")
            if not isinstance(exc, Exception):
                raise  # the thread, or the caller, still ends as it was told to
            return
        if not loading:
            self._record(key)
        self._ended_as(key, None, loading=loading)

    def _ended_as(self, key: K, why: str | None, *, loading: bool = False) -> None:
        """``key``'s build ended: built (``why`` None) or failed, once (a build past its
        deadline has failed already: how it ends later changes nothing)."""
        with self._lock:
            if key in self._failed:
                return
            if why is None:
                self._ready.add(key)
                self._loaded += loading
            else:
                self._failed[key] = why
            self._began.pop(key, None)
            told = self._building.pop(key, [])
            self._ended.notify_all()
        for done in told:
            try:
                done(why)
            except Exception:  # a listener's failure (its logging) must not end the build's
                continue  # thread before the others hear
