"""What one policy set decides for one group of identical nodes, as comparable values: each
decision and each engine setting (variable or flag option), computed once per group."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from kernelpolicy.bridge import engine_settings
from kernelpolicy.engine.decide import resolve_policies
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.evidence.store import Evidence
from kernelpolicy.fleet.result import RolloutSteps
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.policy.rollout import Cohort, CompiledRollout

__all__ = [
    "ENGINES", "Group", "Outcome", "Resolver", "StagedDisable", "disable_rollouts", "flag_options",
    "staged_disables", "with_disable_percent",
]  # fmt: skip

ENGINES = ("vllm", "sglang")
"""The engines whose settings are compared."""

Outcome = dict[tuple[str, str], str]  # (kind, name) -> value, for one node kind and cohorts
Group = tuple[int, tuple[Cohort, ...]]
"""(class index, the node's cohort in each staged rollout): the candidates' rollouts and the
staged ``[[disable]]`` entries of both policy sets, so that nodes of one class that a staged
candidate or a staged switch-off treats apart are resolved apart."""


class StagedDisable(NamedTuple):
    """A ``[[disable]]`` with a rollout: ``position`` in its policy set's ``disables``
    (``[:2]``: the candidate it names, feature and implementation)."""

    feature: str
    impl: str
    rollout: CompiledRollout
    position: int


def staged_disables(policies: PolicySet) -> list[StagedDisable]:
    """Every staged ``[[disable]]`` of ``policies``, in their order."""
    return [
        StagedDisable(d.spec.feature, d.spec.impl, d.rollout, index)
        for index, d in enumerate(policies.disables)
        if d.rollout is not None
    ]


def with_disable_percent(policies: PolicySet, staged: StagedDisable, percent: float) -> PolicySet:
    """``policies`` with one staged disable at ``percent`` (same cohort order)."""
    disables = list(policies.disables)
    disables[staged.position] = replace(
        disables[staged.position], rollout=staged.rollout.with_percent(percent)
    )
    return replace(policies, disables=tuple(disables))


def disable_rollouts(
    old: PolicySet,
    new: PolicySet,
    steps: Sequence[float],
    choosing: Callable[[PolicySet, str, str], Sequence[int]],
    *,
    through: Collection[tuple[str, ...]],
    name: Callable[[int], str],
) -> tuple[list[RolloutSteps], set[int]]:
    """Each staged disable of ``new`` as a staged rollout, and the nodes they can reach.

    A step counts the nodes the disable switches off at that percent (each of ``steps``, its
    own percent, and 100 for the reach): those for which ``choosing`` (the nodes, by index,
    that decide the feature's ``impl`` under a policy set) finds its candidate at 0% (the
    disable applying nowhere) and not at that percent. It is ``changed`` where ``old`` has no
    staged disable of the candidate at that rollout, or some node changes through it (in
    ``through``, ``(feature, impl, "disable")``); ``name``: a node's name by its index."""
    found: list[RolloutSteps] = []
    reach: set[int] = set()
    for item in staged_disables(new):
        running = choosing(with_disable_percent(new, item, 0.0), *item[:2])
        shown = sorted({*steps, item.rollout.percent})
        off: dict[float, list[int]] = {}
        for percent in sorted({*shown, 100.0}):
            still = set(choosing(with_disable_percent(new, item, percent), *item[:2]))
            off[percent] = [index for index in running if index not in still]
        before = [d.rollout for d in staged_disables(old) if d[:2] == item[:2]]
        changed = item.rollout not in before or (*item[:2], "disable") in through
        counts = tuple((p, len(off[p])) for p in shown)
        names = tuple(tuple(map(name, off[p])) for p in shown)
        found.append(RolloutSteps(*item[:2], item.rollout.percent, counts, names, changed, True))
        reach.update(off[100.0])
    return found, reach


class Resolver:
    """One policy set's outcomes, computed once per (class, cohorts) group."""

    def __init__(self, policies: PolicySet, *, engines: Sequence[str] = ENGINES) -> None:
        self.policies = policies
        self.engines = engines
        self.cache: dict[Group, Outcome] = {}

    def outcome(
        self,
        group: Group,
        platform: Platform,
        evidence: Evidence | None,
        halts: Mapping[str, str] | None = None,
    ) -> Outcome:
        """``evidence`` and ``halts`` (``feature/impl`` -> why, as the daemon resolves with
        them): the group's class's (one per class, see :func:`.class_of`)."""
        found = self.cache.get(group)
        if found is None:
            found = self.cache[group] = self._compute(platform, evidence, halts)
        return found

    def _compute(
        self, platform: Platform, evidence: Evidence | None, halts: Mapping[str, str] | None
    ) -> Outcome:
        resolution = resolve_policies(
            platform, platform.env, self.policies, evidence=evidence, halts=halts
        )
        out: Outcome = {("decision", n): _decided(resolution, n) for n in resolution.decisions}
        for engine in self.engines:
            settings = engine_settings(resolution, engine, platform.env)
            for variable, value in settings.env.items():
                out[(f"{engine} env", variable)] = value
            for option, value in flag_options(settings.flags).items():
                out[(f"{engine} flag", option)] = value
        return out


def flag_options(words: Sequence[str]) -> dict[str, str]:
    """``--a x --b=y --c`` -> ``{"--a": "x", "--b": "y", "--c": "(set)"}``: each option
    compared on its own, so that one change is one line whatever the other flags are."""
    options: dict[str, str] = {}
    current: str | None = None
    for word in words:
        if word.startswith("--"):
            current, sep, value = word.partition("=")
            options[current] = value if sep else "(set)"
        elif current is not None:
            held = options[current]
            options[current] = word if held == "(set)" else f"{held} {word}"
    return options


def _decided(resolution: Resolution, feature: str) -> str:
    decision = resolution.decisions[feature]
    if decision.error_code is not None:
        return f"error ({decision.error_code.value})"
    return decision.impl or "none"
