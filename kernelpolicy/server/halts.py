"""The daemon's run-time account of its node: what workers reported, and which kernels are halted.

Workers report events (:mod:`kernelpolicy.server.reports`); each one about a feature and an
implementation of the policy set in use is counted, the rest are refused and counted as
``unknown``, so every key here comes from the policy files (bounded, whatever workers send).
A candidate with ``halt_on`` is halted once its guard trips or run-time failures on this node
reach the threshold; the daemon then resolves without it (``resolve_policies(halts=...)``)
until ``clear(feature)`` or a change of that feature's policy. A change that only moves rollout
percents (the next step of a staged rollout) keeps the halt: it is about the kernel misbehaving
on this node, which a wider rollout does not change.

Thread-safe: the event loop records and clears while a reload thread reads :meth:`adopt`.
Halts live in the daemon's memory: a restarted daemon starts with none (workers that still
trip the guard halt the kernel again).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from kernelpolicy.limits import SHOWN_HALT_DETAIL_CHARS, shown
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.policy.record import encode
from kernelpolicy.server.reports import Event, EventKind, Rejection

__all__ = ["Halts", "Tally", "halt_survives"]


@dataclass
class Tally:
    """One candidate's events on this node since it was last cleared (or its policy changed)."""

    guard_trips: int = 0
    runtime_failures: int = 0
    last_detail: str = ""


Key = tuple[str, str]  # (feature, impl), both from the policy set


class Halts:
    """Counts, halts and the totals the daemon's metrics show.

    Attributes:
        totals: (feature, impl, kind) -> events reported since the daemon started (counters).
        halts_total: (feature, impl) -> times the candidate was halted since the daemon started
            (a counter: it never goes down; a key goes only with its candidate's policy entry).
        rejected: Why reports were refused -> how many (lines, connections or events).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._policies: PolicySet | None = None
        self._tally: dict[Key, Tally] = {}
        self._halted: dict[Key, str] = {}
        self.totals: dict[tuple[str, str, str], int] = {}
        self.halts_total: dict[Key, int] = {}
        self.rejected: dict[Rejection, int] = dict.fromkeys(Rejection, 0)

    def reject(self, why: Rejection, count: int = 1) -> None:
        with self._lock:
            self.rejected[why] += count

    def record(self, events: list[Event]) -> list[Key]:
        """Count ``events``; returns the candidates they halted (newly)."""
        halted: list[Key] = []
        with self._lock:
            policies = self._policies
            for event in events:
                candidate = _candidate(policies, event.feature, event.impl)
                if candidate is None:
                    self.rejected[Rejection.UNKNOWN] += 1
                    continue
                key = (event.feature, event.impl)
                total = (event.feature, event.impl, event.kind.value)
                self.totals[total] = self.totals.get(total, 0) + event.count
                if event.kind is EventKind.SERVED or key in self._halted:
                    continue
                tally = self._tally.setdefault(key, Tally())
                if event.kind is EventKind.GUARD_TRIP:
                    tally.guard_trips += event.count
                else:
                    tally.runtime_failures += event.count
                    tally.last_detail = shown(event.detail, SHOWN_HALT_DETAIL_CHARS)
                why = _halt_reason(candidate.spec.halt_on, event.impl, tally)
                if why is not None:
                    self._halted[key] = why
                    self.halts_total[key] = self.halts_total.get(key, 0) + 1
                    halted.append(key)
        return halted

    def clear(self, feature: str) -> list[str]:
        """Lift every halt of ``feature`` and start its counts again; returns the impls lifted.

        Raises:
            KeyError: The policies define no such feature.
        """
        with self._lock:
            if self._policies is None or feature not in self._policies.features:
                raise KeyError(feature)
            lifted = sorted(impl for (name, impl) in self._halted if name == feature)
            for key in [k for k in self._tally if k[0] == feature]:
                del self._tally[key]
            for impl in lifted:
                del self._halted[(feature, impl)]
            return lifted

    def adopt(self, policies: PolicySet) -> dict[str, str]:
        """Use ``policies`` from now on: counts and halts of a feature whose policy changed
        other than in its rollout percents (or whose candidate lost ``halt_on``) are dropped;
        the counters only with their candidate. Returns the halts to resolve with."""
        with self._lock:
            old = self._policies
            self._policies = policies
            if old is not policies:
                rules: dict[str, bool] = {}
                for store in (self._tally, self._halted):
                    for key in [k for k in store if not halt_survives(old, policies, *k, rules)]:
                        del store[key]
                for total in [t for t in self.totals if _candidate(policies, *t[:2]) is None]:
                    del self.totals[total]
                for gone in [k for k in self.halts_total if _candidate(policies, *k) is None]:
                    del self.halts_total[gone]
            return self._inputs()

    def inputs(self) -> dict[str, str]:
        """``feature/impl`` -> why, as :func:`~kernelpolicy.engine.decide.resolve_policies`
        takes them."""
        with self._lock:
            return self._inputs()

    def _inputs(self) -> dict[str, str]:
        return {f"{feature}/{impl}": why for (feature, impl), why in sorted(self._halted.items())}

    def halt_on_candidates(self) -> list[Key]:
        """Every (feature, impl) of the policy set in use with ``halt_on``, in policy order."""
        with self._lock:
            policies = self._policies
        if policies is None:
            return []
        return [
            (name, c.impl)
            for name, feature in policies.features.items()
            for c in feature.candidates
            if c.spec.halt_on is not None
        ]


def _candidate(policies: PolicySet | None, feature: str, impl: str) -> Any:
    compiled = policies.features.get(feature) if policies is not None else None
    return compiled.candidate(impl) if compiled is not None else None


def halt_survives(
    old: PolicySet | None,
    new: PolicySet,
    feature: str,
    impl: str,
    rules: dict[str, bool] | None = None,
) -> bool:
    """Whether the candidate's halt (and its counts) under ``old`` survive a change to ``new``:
    it still has ``halt_on`` and its feature's policy is the same but for rollout percents
    (``rules``, where given, holds each feature's answer, worked out once for many keys)."""
    rules = {} if rules is None else rules
    before, after = _candidate(old, feature, impl), _candidate(new, feature, impl)
    if old is None or before is None or after is None or after.spec.halt_on is None:
        return False
    if feature not in rules:
        rules[feature] = _rule(old, feature) == _rule(new, feature)
    return rules[feature]


def _rule(policies: PolicySet, feature: str) -> Any:
    """The feature's policy without its candidates' rollout percents: what a halt depends on.

    Encoded (:func:`~kernelpolicy.policy.record.encode`) so that a set validated by pydantic
    and one read from the compiled-pack cache compare alike. A rollout's salt stays (it draws
    another cohort); no rollout counts as the last step of one (every node, no salt).
    """
    encoded = encode(policies.features[feature].spec)
    for candidate in encoded["f"]["candidates"]["l"]:
        rollout = candidate["f"]["rollout"]
        candidate["f"]["rollout"] = "" if rollout is None else rollout["f"]["salt"]
    return encoded


def _halt_reason(halt_on: Any, impl: str, tally: Tally) -> str | None:
    """Why ``impl`` is halted now, or ``None`` while it is under every threshold."""
    if halt_on is None:
        return None
    trips, failures = halt_on.guard_trips, halt_on.runtime_failures
    if trips is not None and tally.guard_trips >= trips:
        return (
            f"its output guard repaired {tally.guard_trips} output(s) in this node's workers "
            f"(halt_on.guard_trips = {trips})"
        )
    if failures is not None and tally.runtime_failures >= failures:
        return (
            f"{impl} failed at run time {tally.runtime_failures} time(s) in this node's workers "
            f"(halt_on.runtime_failures = {failures}); last: {tally.last_detail}"
        )
    return None
