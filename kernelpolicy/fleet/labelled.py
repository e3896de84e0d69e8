"""The labels kernelpolicy writes on a Node, read back for ``diff``: one family of them (the
``impl.*`` answers, the ``halted.*`` halts), checked as :func:`kernelpolicy.labels.node_labels`
writes them, and each label set read once per kind of node.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

from kernelpolicy.encoding import described
from kernelpolicy.errors import InventoryError
from kernelpolicy.labels import is_valid_name
from kernelpolicy.limits import MAX_FEATURE_FILE_BYTES

__all__ = ["LabelFamily", "PerKind"]

_Labels = TypeVar("_Labels", bound=Hashable)
_Read = TypeVar("_Read")


class LabelFamily:
    """The labels of one family (names ``<prefix>/<family>...``) as kernelpolicy writes them.

    Args:
        family: The start of each name after the prefix, such as ``impl.``.
        whole: The rest of a whole name (under 64 characters), such as ``[a-z][a-z0-9_]*``;
            a longer one was cut to its first characters and a hash (``label_name``).
        value_ok: Whether a label's value is one kernelpolicy writes.
        expected: What a label should be, for the error that names one that is not.
    """

    def __init__(
        self, family: str, whole: str, value_ok: Callable[[str], bool], expected: str
    ) -> None:
        self.family = family
        start = re.escape(family)
        self._shapes = (
            re.compile(start + whole),
            re.compile(start + r"[a-z0-9_.]*[a-z0-9]-[0-9a-f]{8}"),
        )
        self._value_ok = value_ok
        self._expected = expected

    def read(self, labels: Mapping[str, str], prefix: str, source: str) -> list[tuple[str, str]]:
        """The family's labels of a Node, (name without the prefix, value), sorted.

        Raises:
            InventoryError: A label of the family is not one kernelpolicy writes, or the node
                has more of them than one feature file holds (``MAX_FEATURE_FILE_BYTES``,
                where its daemon writes them).
        """
        start = f"{prefix}/{self.family}"
        found = sorted((k, v) for k, v in labels.items() if k.startswith(start))
        size = sum(len(k) + len(v) + 2 for k, v in found)  # as lines of a feature file
        if size > MAX_FEATURE_FILE_BYTES:
            raise InventoryError(
                f"{source}: {len(found)} {self.family}* labels ({size} bytes) are more than one "
                f"feature file holds (MAX_FEATURE_FILE_BYTES, {MAX_FEATURE_FILE_BYTES})"
            )
        for key, value in found:
            name = key[len(prefix) + 1 :]
            shaped = any(shape.fullmatch(name) for shape in self._shapes)
            if not (shaped and is_valid_name(name) and self._value_ok(value)):
                raise InventoryError(
                    f"{source}: label {described(key, 300)}={described(value, 80)}: expected "
                    f"{self._expected}"
                )
        return [(k[len(prefix) + 1 :], v) for k, v in found]


class PerKind(Generic[_Labels, _Read]):
    """``read`` of a Node's labels, once per kind of node: nodes of a kind share their labels,
    and so the one result read from them."""

    def __init__(self, read: Callable[[_Labels], _Read]) -> None:
        self._read = read
        self._done: dict[_Labels, _Read] = {}

    def __call__(self, labels: _Labels) -> _Read:
        if labels not in self._done:
            self._done[labels] = self._read(labels)
        return self._done[labels]
