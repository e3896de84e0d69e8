"""What the daemon serves: an immutable snapshot, swapped atomically on reload.

A reload reads and validates the policy files, resolves them, and only then replaces the
snapshot; a bad file keeps the last good set and is reported. Handlers read ``state.snapshot``
once per request, so every answer comes from one consistent snapshot.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpolicy.conformance.evidence import Evidence, load_evidence
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.engine.resolve import resolve_policies
from kernelpolicy.errors import PolicyError
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.policy.loader import load_policy_sources, read_policy_sources


@dataclass(frozen=True)
class Snapshot:
    revision: int
    resolution: Resolution
    sources: tuple[tuple[str, str], ...]
    evidence: Evidence | None
    policy_error: str | None = None
    cache: dict[Any, Any] = field(default_factory=dict, compare=False)  # per-snapshot answers

    @property
    def policies(self) -> PolicySet:
        return self.resolution.policies


@dataclass(frozen=True)
class Change:
    revision: int
    flags: tuple[str, ...]  # feature and gate names whose answer may have changed


class ServingState:
    """The current snapshot, how to make the next one, and who wants to hear about it."""

    def __init__(
        self,
        platform: Platform,
        env: Mapping[str, str],
        policy_paths: Sequence[Path],
        overrides: Mapping[str, str],
        cache_dir: Path | None = None,
        *,
        allow_untrusted: bool = False,
    ) -> None:
        self.platform = platform
        self.env = dict(env)
        self.policy_paths = list(policy_paths)
        self.overrides = dict(overrides)
        self.cache_dir = cache_dir
        self.allow_untrusted = allow_untrusted
        self._subscribers: set[asyncio.Queue[Change]] = set()
        sources = tuple(read_policy_sources(self.policy_paths))  # raises: nothing to serve yet
        self.snapshot = self._build(1, sources, None)

    def _build(
        self, revision: int, sources: tuple[tuple[str, str], ...], error: str | None
    ) -> Snapshot:
        policies = load_policy_sources(sources)
        evidence = None
        if policies.needs_evidence:
            evidence = load_evidence(
                self.platform, self.cache_dir, allow_untrusted=self.allow_untrusted
            )
        resolution = resolve_policies(self.platform, self.env, policies, self.overrides, evidence)
        return Snapshot(revision, resolution, sources, evidence, error)

    def prepare_reload(self) -> Snapshot | str:
        """Read, validate and resolve the files now on disk (run it off the event loop).

        Returns:
            The next snapshot, or the error that keeps the current one.
        """
        try:
            sources = tuple(read_policy_sources(self.policy_paths))
            return self._build(self.snapshot.revision + 1, sources, None)
        except PolicyError as exc:
            return str(exc)

    def commit(self, prepared: Snapshot | str) -> Change | None:
        """Swap in a prepared snapshot (on the event loop). Returns what changed, if anything."""
        current = self.snapshot
        if isinstance(prepared, str):
            if prepared != current.policy_error:
                self.snapshot = dataclasses.replace(current, policy_error=prepared, cache={})
            return None
        if prepared.resolution.fingerprint == current.resolution.fingerprint:
            if current.policy_error is not None:  # fixed files that equal the last good set
                self.snapshot = dataclasses.replace(current, policy_error=None, cache={})
            return None
        self.snapshot = prepared
        change = Change(prepared.revision, changed_flags(current, prepared))
        for queue in list(self._subscribers):
            queue.put_nowait(change)
        return change

    def subscribe(self) -> asyncio.Queue[Change]:
        queue: asyncio.Queue[Change] = asyncio.Queue()
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Change]) -> None:
        self._subscribers.discard(queue)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)


def changed_flags(old: Snapshot, new: Snapshot) -> tuple[str, ...]:
    """Features whose decision differs, and gates whose definition or state differs."""
    a, b = old.resolution, new.resolution
    flags = [
        name
        for name in dict.fromkeys([*a.decisions, *b.decisions])
        if name not in a.decisions
        or name not in b.decisions
        or a.decisions[name].to_dict() != b.decisions[name].to_dict()
    ]
    for name in dict.fromkeys([*a.policies.gates, *b.policies.gates]):
        old_gate, new_gate = a.policies.gates.get(name), b.policies.gates.get(name)
        if (old_gate is None) != (new_gate is None) or (
            old_gate and new_gate and old_gate.spec != new_gate.spec
        ):
            flags.append(name)
        elif old_gate and new_gate and old_gate.spec.requires:
            feature = old_gate.spec.requires.feature
            if feature in flags:
                flags.append(name)
    return tuple(flags)
