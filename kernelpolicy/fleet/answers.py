"""What each node's daemon decided, checked by ``diff`` against what the current policies decide
for that node: a node that answers otherwise runs other policies, or its labels are stale, and
its changes are counted from what the policies decide, not from what it runs.

Where the answers come from depends on the inventory:

* a live daemon sends its decisions (``Resolve``), feature -> implementation or ``error
  (<code>)`` (:mod:`kernelpolicy.fleet.daemons`);
* a labelled Node carries ``impl.<feature>`` labels, written by its daemon
  (:func:`kernelpolicy.labels.node_labels`: the implementation, ``error`` or ``none``), read
  here as :class:`LabelAnswers` and compared as labels say it (:func:`as_label`);
* a platform snapshot carries none: nothing to check.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from kernelpolicy.fleet.labelled import LabelFamily, PerKind
from kernelpolicy.labels import PREFIX, is_valid_value, label_name, label_value
from kernelpolicy.policy.compiled import PolicySet

__all__ = [
    "UNSET", "Answered", "AnswersReader", "LabelAnswers", "NodeAnswers", "Said", "as_label",
    "disagreement",
]  # fmt: skip

UNSET = "(unset)"
"""A feature one side does not decide (its policies lack it, or no label names it)."""
_IMPL = "impl."
# As kernelpolicy writes them: impl.<feature> (label_name), a valid label value.
_FAMILY = LabelFamily(
    _IMPL,
    r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*",
    lambda value: bool(value) and is_valid_value(value),
    f"{_IMPL}<feature>=<implementation>, error or none, as 'kernelpolicy labels' writes it",
)


class Said(enum.Enum):
    """Who says what a node decided: how ``diff`` words a disagreement."""

    DAEMON = "daemon"
    LABEL = "label"


@dataclass(frozen=True)
class LabelAnswers:
    """The ``impl.*`` labels of one Node (label names without the prefix -> value).

    Which feature a label names is read against the policies compared (:meth:`answers`): a
    name over 63 characters was cut and ends in a hash, so only the features tell it.
    """

    labels: tuple[tuple[str, str], ...]

    @classmethod
    def of(
        cls, labels: Mapping[str, str], prefix: str = PREFIX, source: str = "<labels>"
    ) -> LabelAnswers:
        """The ``impl.*`` labels of a Node.

        Raises:
            InventoryError: An ``impl.*`` label is not one kernelpolicy writes (a name of
                ``impl.<feature>``, a valid label value), or the node has more of them than
                one feature file holds (``MAX_FEATURE_FILE_BYTES``, where its daemon writes
                them).
        """
        return cls(tuple(_FAMILY.read(labels, prefix, source)))

    def answers(self, *sets: PolicySet) -> dict[str, str]:
        """Feature -> the label's value, for each label: the feature of ``sets`` whose label
        it is, or else the name without ``impl.`` (a feature the compared policies do not
        have; a cut name stays cut)."""
        values = dict(self.labels)
        found: dict[str, str] = {}
        for policies in sets if values else ():
            for feature in policies.features:
                value = values.pop(label_name(f"{_IMPL}{feature}"), None)
                if value is not None:
                    found[feature] = value
        for name, value in values.items():
            found[name.removeprefix(_IMPL)] = value
        return dict(sorted(found.items()))


NodeAnswers = Mapping[str, str] | LabelAnswers | None
"""What a node's daemon decided as its inventory has it: a live daemon's answers (feature ->
implementation or ``error (<code>)``), its labels, or ``None`` (a snapshot: unknown)."""

Answered = tuple[Mapping[str, str], Said]
"""A node's answers (feature -> value) and who says them."""


class AnswersReader:
    """Each node's answers for a comparison of ``old`` and ``new``: a node's labels are read
    against both, once per kind of node (nodes of a kind share their labels, and so the one
    mapping read from them)."""

    def __init__(self, old: PolicySet, new: PolicySet) -> None:
        self._labelled = PerKind[LabelAnswers, Answered](
            lambda found: (found.answers(old, new), Said.LABEL)
        )

    def __call__(self, found: NodeAnswers) -> Answered | None:
        if found is None:
            return None
        if not isinstance(found, LabelAnswers):
            return found, Said.DAEMON
        return self._labelled(found)


def as_label(value: str) -> str:
    """A decision as ``impl.<feature>`` says it: ``error`` for any error, the implementation
    made a label value (cut past 63 characters), ``none`` and :data:`UNSET` as they are."""
    if value == UNSET:
        return value
    return "error" if value.startswith("error (") else label_value(value)


def disagreement(answered: Answered, decided: Mapping[str, str]) -> str | None:
    """``feature: daemon X, --policies Y`` (``label X`` from labels) of the first feature, in
    name order, where ``answered`` says otherwise than ``decided`` (feature -> implementation
    or ``error (<code>)``, what the current policies decide), or ``None`` where it agrees."""
    values, said = answered
    for feature in sorted(set(decided) | set(values)):
        theirs, ours = values.get(feature, UNSET), decided.get(feature, UNSET)
        if theirs != (as_label(ours) if said is Said.LABEL else ours):
            return f"{feature}: {said.value} {theirs}, --policies {ours}"
    return None
