"""Degradations: an accelerated kernel that keeps serving, correctly but slower, after part of
it failed at run time (a dtype read as float32 after its kernels failed to compile, a call
shape launched eagerly after its CUDA-graph capture failed). Not a switch to another
implementation; the Resolution records them beside its call-time fallbacks
(``runtime_fallbacks``, the decision's warnings, ``explain``), so a user sees them.

A kernel module exposes ``DEGRADATIONS``, a :class:`Degradations`; each way it can degrade is a
:class:`Degraded` record, a dictionary from what degraded (a dtype) to why, that the kernel
reads on its hot path as any dictionary. The first entry of a key tells the listeners: every
Resolution that loaded an implementation from the module (held weakly, so a Resolution that
is dropped is not kept alive), and those that load one later, when they start listening.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from kernelpolicy.dtypes import dtype_name

K = TypeVar("K", bound=Hashable)


class Degraded(dict[K, str]):
    """One way a kernel degrades: key (a dtype) -> why, with the words that explain it.

    Setting a key it does not hold yet (item assignment or ``setdefault``) tells the
    :class:`Degradations` it belongs to; overwriting one says nothing new.
    """

    def __init__(self, channel: Degradations, what: str, effect: str) -> None:
        """
        Args:
            channel: The module's :class:`Degradations`.
            what: What failed, with ``{key}`` for the key's name ("the kernels failed to
                compile for {key}").
            effect: What the kernel does instead ("{key} logits are read as float32 first").
        """
        super().__init__()
        self._channel = channel
        self.what = what
        self.effect = effect

    def __setitem__(self, key: K, why: str) -> None:
        new = key not in self
        super().__setitem__(key, why)
        if new:
            self._channel.tell(self.note(key, why))

    def setdefault(self, key: K, default: str = "") -> str:
        # dict.setdefault would store the key without calling __setitem__
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, why in dict(*args, **kwargs).items():
            self[key] = why

    def note(self, key: K, why: str) -> str:
        """The sentence a user reads."""
        name = dtype_name(key)
        return f"{self.what.format(key=name)} ({why}); {self.effect.format(key=name)}"


class Degradations:
    """A kernel module's :class:`Degraded` records and who listens to them (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[Degraded[Any]] = []
        self._listeners: list[tuple[weakref.WeakMethod[Callable[..., None]], tuple[Any, ...]]] = []

    def record(self, what: str, effect: str) -> Degraded[Any]:
        """A new, empty record of this module (see :class:`Degraded` for the words)."""
        record: Degraded[Any] = Degraded(self, what, effect)
        with self._lock:
            self._records.append(record)
        return record

    def notes(self) -> list[str]:
        """Every degradation recorded so far, in the records' order."""
        with self._lock:
            records = list(self._records)
        return [record.note(key, why) for record in records for key, why in record.items()]

    def listen(self, callback: Callable[..., None], *args: Any) -> None:
        """Call ``callback(*args, note)`` for every degradation recorded so far, then for each
        new one. ``callback`` must be a bound method: it is held weakly, with its object.

        Raises:
            TypeError: ``callback`` is not a bound method.
        """
        listener = (weakref.WeakMethod(callback), args)
        with self._lock:
            self._listeners.append(listener)
        for note in self.notes():
            callback(*args, note)

    def tell(self, note: str) -> None:
        """Pass one new degradation to every live listener (and forget the dead ones); a
        listener that raises is skipped, since this runs inside the kernel's call."""
        with self._lock:
            self._listeners = [(ref, args) for ref, args in self._listeners if ref() is not None]
            live = list(self._listeners)
        for ref, args in live:
            callback = ref()
            if callback is None:
                continue
            try:
                callback(*args, note)
            except Exception:  # a listener's failure (its logging) must not fail the kernel's
                continue  # call: the kernel goes on serving, which is what the note says
