"""Run-time changes to a Resolution's decisions, with one owner.

A Resolution hands its decisions to its :class:`Fallbacks` when it is built; from then on only
this object changes them, in four ways: it **loads** an implementation (imported or lazily
imported, prepared, wrapped in its output guards, its degradations listened to), and when one
fails at run time it **switches** the feature to its fallback, **refuses an implementation**
(it leaves the order and every batch row: its calls go to the next candidate) or **refuses a
dtype** (that dtype's calls go to the next candidate). Each change is said once in
``runtime_fallbacks`` (:attr:`Fallbacks.notes`), the decision's reasons and warnings, the host's
log and the node's daemon, and the Resolution is told (``changed``) so that ``select()``,
``gate()`` and ``impl()`` answer from the new decision.

A call whose kernel variant is compiling in the background is served elsewhere
(:meth:`Fallbacks.served_elsewhere`) and counted in :attr:`Fallbacks.compiling_calls`.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kernelpolicy.engine.model import Decision, DtypeRule, Reason
from kernelpolicy.errors import ResolutionError
from kernelpolicy.limits import SHOWN_FALLBACK_REASON_CHARS, shown

if TYPE_CHECKING:
    from kernelpolicy.engine.reporting import RuntimeReporter
    from kernelpolicy.kernels.builds import Compiling
    from kernelpolicy.policy.compiled import PolicySet

_SERVING = "serves batch "  # the lines of routing.serving_lines, redone after each change


@dataclasses.dataclass(frozen=True)
class Host:
    """What the process around a Resolution gives it, at construction (never set later).

    Attributes:
        log: Called with (feature, note) for each run-time change (``resolve()`` passes the
            decision log's warning; None: not logged).
        reporter: Where run-time events go: the node's daemon, where one listens.
        revision: The daemon revision the Resolution came from (``connect()``; None
            in-process).
        policy_error: The daemon's last policy reload error (``connect()``).
        policy_entries: Whether an ``entry`` the policies name may be imported. False for
            policies a daemon sent over TCP without TLS, which any local user who binds the
            port first could have written: only kernelpolicy's own implementations load then.
    """

    log: Callable[[str, str], None] | None = None
    reporter: RuntimeReporter | None = None
    revision: int | None = None
    policy_error: str | None = None
    policy_entries: bool = True


class Fallbacks:
    """The run-time state of one Resolution: its notes, its counts, and the changes above."""

    def __init__(
        self,
        policies: PolicySet,
        decisions: dict[str, Decision],
        host: Host,
        changed: Callable[[str], None],
    ) -> None:
        self.policies = policies
        self.decisions = decisions  # the Resolution's own dict: written here only
        self.host = host
        self.notes: dict[str, str] = {}
        self.compiling_calls: dict[str, int] = {}
        self._compiling_noted: set[tuple[str, str, str]] = set()
        self._listening: set[tuple[str, str]] = set()  # (feature, impl) told of degradations
        self._changed = changed
        self._lock = threading.Lock()  # notes come from serving threads and build threads

    def fallback(self, feature: str) -> str | None:
        """The feature's fallback implementation (None: it has none)."""
        return self.policies.features[feature].spec.fallback

    def load(
        self,
        feature: str,
        impl: str,
        wrap: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
    ) -> Callable[..., Any]:
        """``impl``'s callable as it serves calls: imported (or imported on its first call),
        prepared, ``wrap``-ped (the call-time fallback), in its output guards (outermost: they
        repair whatever serves); reported to the node's daemon.

        Raises:
            ResolutionError: No callable ships for ``impl``, or it cannot be loaded here.
        """
        from kernelpolicy.policy.names import builtin_entry

        candidate = self.policies.features[feature].candidate(impl)
        entry = (candidate.spec.entry if candidate else None) or builtin_entry(feature, impl)
        if entry is None:
            raise ResolutionError(
                f"{feature}: no callable ships for implementation {impl!r}; "
                "give the candidate an 'entry = \"module:function\"'"
            )
        builtin = self._builtin(feature, impl)
        if not builtin and not self.host.policy_entries:
            raise ResolutionError(
                f"{feature}/{impl}: cannot load {entry}: named by policies a daemon sent over TCP "
                "without TLS, which anyone who binds its port first could have written; not "
                "imported (connect over the unix socket, or with TLS credentials)"
            )
        function = self._import(feature, impl, entry, builtin=builtin)
        if wrap is not None:
            function = wrap(function)
        chosen = next((c for c in self.decisions[feature].candidates if c.impl == impl), None)
        for guard in chosen.guards if chosen else ():
            from kernelpolicy.kernels.guards import GUARDS

            function = GUARDS[guard](function)
        if self.host.reporter is not None:
            self.host.reporter.loaded(feature, impl, function)
        return function

    def imported_on_first_call(self, feature: str, impl: str) -> bool:
        """Whether ``impl`` is an accelerated implementation kernelpolicy ships, which
        :meth:`load` hands out unimported (a ``LazyEntry``): loading it checks its libraries
        and starts its import in the background, and costs the caller nothing more."""
        from kernelpolicy.policy.names import REQUIRES

        return self._builtin(feature, impl) and impl in REQUIRES

    def _builtin(self, feature: str, impl: str) -> bool:
        """Whether ``impl``'s callable is the one kernelpolicy ships (the policy names none)."""
        candidate = self.policies.features[feature].candidate(impl)
        return candidate is None or candidate.spec.entry is None

    def _import(self, feature: str, impl: str, entry: str, *, builtin: bool) -> Callable[..., Any]:
        """``entry``'s callable, in its serving form where it has one (a variant not built yet
        is served elsewhere); a built-in accelerated implementation is imported on its first
        call (:class:`~kernelpolicy.engine.loading.LazyEntry`)."""
        from kernelpolicy.engine.loading import EXTRA_HINTS, LazyEntry
        from kernelpolicy.policy.entries import load_prepared
        from kernelpolicy.policy.names import PREPARE, REQUIRES

        prepare = PREPARE.get(impl) if builtin else None

        def loaded(function: Callable[..., Any]) -> None:
            self._listen(feature, impl, entry, function)

        try:
            if self.imported_on_first_call(feature, impl):
                # a call that finds it importing is served elsewhere, but the fallback's waits
                nonblocking = impl != self.fallback(feature)
                lazy = LazyEntry(entry, prepare, REQUIRES[impl], loaded, nonblocking=nonblocking)
                lazy.prefetch()  # off the call path: impl() returns at once
                return lazy
            prepared = load_prepared(entry, prepare)
        except Exception as exc:  # import errors, missing CUDA/ROCm runtimes, JIT build errors
            missing = (exc.name or "") if isinstance(exc, ModuleNotFoundError) else ""
            hint = EXTRA_HINTS.get(missing.partition(".")[0], "")  # the extra that installs it
            raise ResolutionError(f"{feature}/{impl}: cannot load {entry}: {exc}{hint}") from exc
        loaded(prepared.function)
        return prepared.served

    def _listen(self, feature: str, impl: str, entry: str, function: Callable[..., Any]) -> None:
        """Record the degradations of ``entry`` (its callable's ``degradations``, else its
        module's ``DEGRADATIONS``; see :mod:`kernelpolicy.kernels.degraded`): those so far,
        and each new one."""
        from kernelpolicy.kernels.degraded import Degradations
        from kernelpolicy.policy.entries import parse_entry

        channel = getattr(function, "degradations", None)
        if not isinstance(channel, Degradations):
            module = sys.modules.get(parse_entry(entry).module)
            channel = getattr(module, "DEGRADATIONS", None)
        if isinstance(channel, Degradations) and (feature, impl) not in self._listening:
            self._listening.add((feature, impl))
            channel.listen(self._degraded, feature, impl)

    def _degraded(self, feature: str, impl: str, what: str) -> None:
        """``impl`` of ``feature`` still serves, slower: a warning, no switch."""
        note = f"{impl} degraded at run time: {what}; still {impl}, correct but slower"

        def degraded(decision: Decision) -> _Change | None:
            if impl not in decision.order or note in decision.warnings:
                return None  # it serves no call of this Resolution, or this is said already
            return _Change(
                dataclasses.replace(
                    decision,
                    reasons=(*decision.reasons, f"degraded: {note}"),
                    warnings=(*decision.warnings, note),
                ),
                note,
                routes=False,
            )

        self._change(feature, degraded)

    def _add_note(self, feature: str, note: str) -> None:
        """Add ``note`` to ``runtime_fallbacks``, after what it says already (the caller holds
        the lock)."""
        previous = self.notes.get(feature)
        self.notes[feature] = f"{previous}; {note}" if previous else note

    def _tell(self, feature: str, note: str, failed: str | None) -> None:
        """Say ``note`` to the host's log, and to the node's daemon where ``failed``."""
        if self.host.log is not None:
            self.host.log(feature, note)
        if failed is not None and self.host.reporter is not None:
            self.host.reporter.report("runtime_failure", feature, failed, detail=note)

    def _change(self, feature: str, change: Callable[[Decision], _Change | None]) -> None:
        """Replace ``feature``'s decision by what ``change`` makes of it (None: nothing to
        change) as one step: the read, the write, the note and, where the change routes calls
        differently, the rebuilt ``select``/``gate``, all under the lock, so that a build
        thread's note and a call thread's switch never write over each other. The host's log
        and the daemon hear of it after, outside the lock (a log may call back in). Readers
        (the hot paths) take no lock: they see the old decision or the new one."""
        with self._lock:
            made = change(self.decisions[feature])
            if made is None:
                return
            self.decisions[feature] = made.decision
            self._add_note(feature, made.note)
            if made.routes:
                self._changed(feature)
        self._tell(feature, made.note, made.failed)

    def switch(self, feature: str, why: str) -> None:
        """The chosen implementation failed at run time: the whole feature goes to its
        fallback for the rest of the process. ``why`` is cut (:func:`_cut`)."""
        why = _cut(why)
        self._change(feature, lambda decision: self._switched(decision, why))

    def _switched(self, decision: Decision, why: str) -> _Change:
        fallback = self.fallback(decision.feature)
        assert fallback is not None
        note = f"{decision.impl} failed at run time ({why}); using {fallback} in this process"
        switched = dataclasses.replace(
            decision,
            impl=fallback,
            reason=Reason.FALLBACK,
            reasons=(f"{fallback}: fallback, {note}", *decision.reasons),
            warnings=(*decision.warnings, note),
            order=(fallback,),
            routes=(),
            dtype_rules=(),
        )
        return _Change(switched, note, failed=decision.impl)

    def refuse_dtype(self, feature: str, impl: str, dtype: str, why: str) -> None:
        """``impl`` serves ``dtype`` no more in this process: calls of it go to the next
        candidate, in ``impl()`` and ``select()`` alike. ``why`` is cut (:func:`_cut`)."""
        why = _cut(why)
        note = (
            f"{impl} failed at run time for {dtype} ({why}); {dtype} calls go to the next candidate"
        )

        def refused(decision: Decision) -> _Change:
            rules = {rule.impl: rule for rule in decision.dtype_rules}
            old = rules.get(impl, DtypeRule(impl, None))
            rules[impl] = dataclasses.replace(old, refuses=(*old.refuses, dtype), why=note)
            changed = dataclasses.replace(decision, dtype_rules=tuple(rules.values()))
            return _recorded(changed, f"dtype: {note}", note, failed=impl)

        self._change(feature, refused)

    def refuse_impl(
        self, feature: str, impl: str, why: str, *, how: str = "cannot be loaded"
    ) -> None:
        """``impl``, one of the decision's routed implementations, cannot be loaded (or, as
        ``how`` says, failed on a call another candidate then served): it leaves
        the order and every batch row, so the calls routed to it go to the next candidate of
        their row (the fallback last), in ``impl()`` and ``select()`` alike. Where it was the
        decision's choice, the next of the order becomes the choice; where only the fallback
        would be left, the feature switches to it as a whole. ``why`` is cut (:func:`_cut`)."""
        why = _cut(why)
        note = f"{impl} {how} ({why}); the calls routed to it go to the next candidate"

        def without(order: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(name for name in order if name != impl)

        def refused(decision: Decision) -> _Change:
            rest = without(decision.order)
            if impl == decision.impl and rest == (self.fallback(feature),):
                return self._switched(decision, why)
            changed = dataclasses.replace(
                decision,
                impl=rest[0] if impl == decision.impl and rest else decision.impl,
                order=rest,
                routes=tuple(
                    dataclasses.replace(r, order=without(r.order)) for r in decision.routes
                ),
                dtype_rules=tuple(rule for rule in decision.dtype_rules if rule.impl != impl),
            )
            return _recorded(changed, note, note, failed=impl)

        self._change(feature, refused)

    def served_elsewhere(self, feature: str, impl: str, compiling: Compiling) -> None:
        """A call of ``impl``, whose variant is ``compiling``, was served by another candidate
        (``engine.dispatch``): count it, and say so once per variant (and once more when
        built)."""
        with self._lock:
            self.compiling_calls[feature] = self.compiling_calls.get(feature, 0) + 1
            key = (feature, impl, compiling.what)
            if key in self._compiling_noted:
                return
            self._compiling_noted.add(key)
        self._note_compiling(
            feature,
            f"{impl} is {compiling.doing} {compiling.what} in the background; its calls go to "
            f"the next ready candidate until it is {compiling.did}",
        )

        def built(why: str | None) -> None:
            if why is None:  # a failure is said by the call that meets it, as any call's
                self._note_compiling(
                    feature, f"{impl} {compiling.did} {compiling.what}; its calls switch to it"
                )

        compiling.when_built(built)

    def _note_compiling(self, feature: str, note: str) -> None:
        """A kernel variant compiling in the background, or built: a note in
        ``runtime_fallbacks`` and a reason (not a warning: nothing is wrong, and it passes)."""
        self._change(
            feature,
            lambda decision: _Change(
                dataclasses.replace(decision, reasons=(*decision.reasons, f"compiling: {note}")),
                note,
                routes=False,
            ),
        )


@dataclasses.dataclass(frozen=True)
class _Change:
    """One run-time change of a decision (:meth:`Fallbacks._change`).

    Attributes:
        decision: The decision after it.
        note: What ``runtime_fallbacks`` and the host's log say of it.
        failed: The implementation the node's daemon is told failed (None: nothing failed).
        routes: Whether calls may route differently (``select``/``gate`` are rebuilt); False
            where only reasons and warnings change.
    """

    decision: Decision
    note: str
    failed: str | None = None
    routes: bool = True


def _cut(why: str) -> str:
    """Why an implementation stops serving, as every change keeps it: cut to
    ``SHOWN_FALLBACK_REASON_CHARS``, here, for every caller (a kernel's error at load or at call
    may be any length)."""
    return shown(why, SHOWN_FALLBACK_REASON_CHARS)


def _recorded(changed: Decision, reason: str, note: str, *, failed: str) -> _Change:
    """``changed`` with ``reason``, ``note`` as a warning and a fresh account of who serves
    what (reporting that ``failed`` failed)."""
    from kernelpolicy.engine.routing import serving_lines

    kept = tuple(line for line in changed.reasons if not line.startswith(_SERVING))
    recorded = dataclasses.replace(
        changed,
        reasons=(*kept, reason, *serving_lines(changed)),
        warnings=(*changed.warnings, note),
    )
    return _Change(recorded, note, failed=failed)
