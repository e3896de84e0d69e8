"""What one policy set decides for one group of identical nodes, as comparable values: each
decision and each engine setting (variable or flag option), computed once per group."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kernelpolicy.bridge import engine_settings
from kernelpolicy.engine.decide import resolve_policies
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.evidence.store import Evidence
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.policy.rollout import Cohort

__all__ = ["ENGINES", "Group", "Outcome", "Resolver", "flag_options"]

ENGINES = ("vllm", "sglang")
"""The engines whose settings are compared."""

Outcome = dict[tuple[str, str], str]  # (kind, name) -> value, for one node kind and cohorts
Group = tuple[int, tuple[Cohort, ...]]  # (class index, cohort of each rollout)


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
