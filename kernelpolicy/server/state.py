"""What the daemon serves: an immutable snapshot, swapped atomically on reload.

A reload reads and validates the policy files, resolves them, and only then replaces the
snapshot; a bad file keeps the last good set and is reported. Handlers read ``state.snapshot``
once per request, so every answer comes from one consistent snapshot.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kernelpolicy.engine.decide import halts_of
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.evidence.store import Evidence
from kernelpolicy.inputs import evidence_for, given
from kernelpolicy.limits import (
    MAX_ANSWER_CACHE_BYTES,
    MAX_ANSWER_CACHE_ENTRIES,
    SHOWN_ERROR_CHARS,
    shown,
)
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.policy.loader import load_policy_sources, read_policy_sources
from kernelpolicy.server.halts import Halts
from kernelpolicy.server.node import daemon_instance


class AnswerCache:
    """Serialised answers of one snapshot, least recently used dropped first.

    Bounded by entries (``MAX_ANSWER_CACHE_ENTRIES``) and by bytes of keys and answers together
    (``MAX_ANSWER_CACHE_BYTES``), so no client can grow the daemon by asking many different
    questions. Used from the event loop only (no lock).
    """

    def __init__(
        self, max_entries: int = MAX_ANSWER_CACHE_ENTRIES, max_bytes: int = MAX_ANSWER_CACHE_BYTES
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[Hashable, tuple[bytes, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> bytes | None:
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: Hashable, answer: bytes) -> None:
        """Keep ``answer``; one larger than the whole budget is not kept at all."""
        size = len(answer) + _key_bytes(key)
        if size > self.max_bytes:
            return
        old = self._items.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        self._items[key] = (answer, size)
        self.bytes += size
        while len(self._items) > self.max_entries or self.bytes > self.max_bytes:
            _, (_, dropped) = self._items.popitem(last=False)
            self.bytes -= dropped


def _key_bytes(key: Hashable) -> int:
    """What a key costs: its strings' lengths plus a fixed overhead per element."""
    parts = key if isinstance(key, tuple) else (key,)
    total = 64
    for part in parts:
        if isinstance(part, tuple):
            total += sum(len(str(item)) + 64 for item in part)
        else:
            total += len(str(part)) + 64
    return total


@dataclass(frozen=True)
class Snapshot:
    revision: int
    resolution: Resolution
    sources: tuple[tuple[str, str], ...]
    evidence: Evidence | None
    policy_error: str | None = None
    cache: AnswerCache = field(default_factory=AnswerCache, compare=False)  # serialised answers

    @property
    def policies(self) -> PolicySet:
        return self.resolution.policies


@dataclass(frozen=True)
class Change:
    revision: int
    flags: tuple[str, ...]  # feature and gate names whose answer may have changed


def _absolute(path: Path) -> Path:
    """``path`` made absolute from the working directory (``+DIR`` stays a ``+`` entry)."""
    text = str(path)
    plus = "+" if text.startswith("+") else ""
    return Path(plus + os.path.abspath(text.removeprefix("+")))


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
        # Absolute, so that status, Explain and the logs name the files wherever they are read
        # (symbolic links kept: a ConfigMap's are followed at each reload).
        self.policy_paths = [_absolute(path) for path in policy_paths]
        self.overrides = dict(overrides)
        self.cache_dir = cache_dir
        self.allow_untrusted = allow_untrusted
        self._subscribers: set[asyncio.Queue[Change]] = set()
        self.halts = Halts()  # what workers reported, and the candidates halted on this node
        self.instance = daemon_instance()  # this daemon among a fleet's (GetPlatform's daemon)
        # Raises at start-up: there is nothing to serve yet.
        sources = tuple(read_policy_sources(self.policy_paths, allow_untrusted=allow_untrusted))
        self.snapshot = self._build(1, sources, None)

    def _build(
        self, revision: int, sources: tuple[tuple[str, str], ...], error: str | None
    ) -> Snapshot:
        return self._resolved(revision, sources, load_policy_sources(sources), error)

    def _resolved(
        self,
        revision: int,
        sources: tuple[tuple[str, str], ...],
        policies: PolicySet,
        error: str | None,
    ) -> Snapshot:
        evidence = evidence_for(
            policies, self.platform, self.cache_dir, allow_untrusted=self.allow_untrusted
        )
        halts = self.halts.adopt(policies)  # a feature whose policy changed loses its halts
        inputs = given(self.platform, self.env, policies, self.overrides, evidence)
        resolution = inputs.resolve(halts=halts)
        return Snapshot(revision, resolution, sources, evidence, error)

    def prepare_halts(self) -> Snapshot | None:
        """The current policies resolved with the halts as they are now (run it off the event
        loop), or ``None`` when the snapshot already has them."""
        current = self.snapshot
        if self.halts.inputs() == halts_of(current.resolution.decisions):
            return None
        return self._resolved(
            current.revision + 1, current.sources, current.policies, current.policy_error
        )

    def prepare_reload(self) -> Snapshot | str:
        """Read, validate and resolve the files now on disk (run it off the event loop).

        Returns:
            The next snapshot, or the error that keeps the current one.
        """
        try:
            sources = tuple(
                read_policy_sources(self.policy_paths, allow_untrusted=self.allow_untrusted)
            )
            return self._build(self.snapshot.revision + 1, sources, None)
        except KernelPolicyError as exc:
            return str(exc)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # the watcher must outlive any loader bug
            # Not only Exception: a panic in a native extension (pyo3's PanicException) is a
            # BaseException, and a reload must never take the daemon down.
            return reload_failure(exc)

    def commit(self, prepared: Snapshot | str) -> Change | None:
        """Swap in a prepared snapshot (on the event loop). Returns what changed, if anything."""
        current = self.snapshot
        if isinstance(prepared, str):
            if prepared != current.policy_error:
                self.snapshot = dataclasses.replace(
                    current, policy_error=prepared, cache=AnswerCache()
                )
            return None
        if prepared.resolution.fingerprint == current.resolution.fingerprint:
            if current.policy_error is not None:  # fixed files that equal the last good set
                self.snapshot = dataclasses.replace(current, policy_error=None, cache=AnswerCache())
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


def reload_failure(exc: BaseException) -> str:
    """The report of a reload that failed on something other than a KernelPolicyError."""
    text = shown(str(exc).strip() or "no message", SHOWN_ERROR_CHARS)
    return (
        f"policy reload failed: {type(exc).__name__}: {text} (a kernelpolicy bug: please report "
        "it with the policy files; the last good policies keep serving)"
    )


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
