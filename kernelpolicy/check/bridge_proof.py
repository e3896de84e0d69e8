"""``kernelpolicy check``: every bridge rule proven against the inference-engine releases it covers.

For each ``engines.<engine>`` rule and every release of the knob tables (:mod:`kernelpolicy.
knobs`) that its ``versions`` range covers and no earlier rule already takes: each variable
it sets is defined and read by that release and parses to what the rule means (``1`` on,
``0`` off, a backend name among the release's enum); each option exists and its value is
among the choices; each fact in ``facts`` holds. A rule set with ``versions`` ranges must
cover every known release once, and a feature whose engine behaviour turns on a fact
(``FEATURE_FACTS``) must name it in each rule that tells the engine something. Each problem
names the rule, the release and the knob.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from packaging.version import Version

from kernelpolicy.errors import PolicyIssue
from kernelpolicy.knobs import PLUGIN_SINCE, KnobTable, knob_table, refused, truthy
from kernelpolicy.policy.compiled import CompiledEngineRule, CompiledFeature, PolicySet
from kernelpolicy.policy.schema.bridge import flag_options

# (engine, feature) -> the facts every rule of that feature must declare: where they change
# between releases, what the engine can be told changes with them.
FEATURE_FACTS: dict[tuple[str, str], tuple[str, ...]] = {
    ("vllm", "mhc"): ("mhc",),
    ("vllm", "sparse_attn_indexer"): ("sparse_indexer_native_archs",),
    ("sglang", "sampler.greedy"): ("aiter_greedy",),
}
RuleSet = tuple[str | None, str, tuple[CompiledEngineRule, ...]]
Problem = tuple[str | None, str]  # (release, what is wrong there); None: the rule as a whole


def prove_bridge_rules(policies: PolicySet) -> list[PolicyIssue]:
    """Every disagreement between ``policies``' bridge rules and the inference engines' releases."""
    issues: list[PolicyIssue] = []
    for feature in policies.features.values():
        for impl, engine, rules in _rule_sets(feature):
            table = knob_table(engine)
            if table is None:
                continue
            prover = _Prover(feature, impl, engine, table)
            issues += prover.coverage(rules)
            for index, rule in enumerate(rules):
                issues += prover.rule(index, rule, _reached(table, rules, index))
    return issues


def _rule_sets(feature: CompiledFeature) -> Iterator[RuleSet]:
    for engine, rules in feature.engines.items():
        yield None, engine, rules
    for candidate in feature.candidates:
        for engine, rules in candidate.engines.items():
            yield candidate.impl, engine, rules


def _covers(rule: CompiledEngineRule, release: str) -> bool:
    return rule.versions is None or rule.versions.contains(release, prereleases=True)


def _other_conditions(rule: CompiledEngineRule) -> tuple[object, ...]:
    spec = rule.spec
    return (spec.vendor, spec.arch, tuple(sorted(spec.libraries)), tuple(spec.if_on))


def _reached(table: KnobTable, rules: tuple[CompiledEngineRule, ...], index: int) -> list[str]:
    """The known releases at which rule ``index`` can apply: in its range, and not taken by
    an earlier rule whose other conditions are no narrower (none at all)."""
    rule = rules[index]
    earlier = [r for r in rules[:index] if _other_conditions(r) == (None, None, (), ())]
    return [
        release
        for release in table.releases
        if _covers(rule, release) and not any(_covers(e, release) for e in earlier)
    ]


class _Prover:
    def __init__(
        self, feature: CompiledFeature, impl: str | None, engine: str, table: KnobTable
    ) -> None:
        self.feature, self.impl, self.engine, self.table = feature, impl, engine, table

    def issue(self, index: int | None, message: str) -> PolicyIssue:
        candidate = self.feature.candidate(self.impl) if self.impl else None
        source = candidate.source if candidate else self.feature.source
        key = f"candidates[{self.impl}].engines" if self.impl else "engines"
        which = f"{self.engine} rules" if index is None else f"{self.engine} rule {index + 1}"
        return PolicyIssue(
            source.file, f"{which}: {message}", source.line, self.feature.name,
            f"{key}.{self.engine}",
        )  # fmt: skip

    def coverage(self, rules: tuple[CompiledEngineRule, ...]) -> list[PolicyIssue]:
        if not any(r.versions is not None for r in rules):
            return []
        problems: list[Problem] = []
        for release in self.table.releases:
            covering = [i for i, r in enumerate(rules) if _covers(r, release)]
            if not covering:
                problems.append((release, "no rule's versions cover it"))
            ranged = [i for i in covering if rules[i].versions is not None]
            for a, b in itertools.pairwise(ranged):
                if _other_conditions(rules[a]) == _other_conditions(rules[b]):
                    problems.append((release, f"covered by both rule {a + 1} and rule {b + 1}"))
        return [self.issue(None, p) for p in _folded(self.engine, problems)]

    def rule(self, index: int, rule: CompiledEngineRule, releases: list[str]) -> list[PolicyIssue]:
        problems: list[Problem] = []
        known = self.table.fact_names()
        for name in (n for n in rule.spec.facts if n not in known and releases):
            problems.append((None, f"fact {name!r} is not in the knob tables ({', '.join(known)})"))
        for release in releases:
            problems += [(release, p) for p in self._at(rule, release)]
        required = FEATURE_FACTS.get((self.engine, self.feature.name), ())
        missing = [name for name in required if name not in rule.spec.facts]
        says = rule.spec.env or rule.spec.flags or rule.spec.inexpressible
        if missing and releases and says:
            problems.append(
                (None, f"name the fact(s) {', '.join(missing)} in 'facts': what {self.engine} "
                 "can be told here changes with them between releases")
            )  # fmt: skip
        return [self.issue(index, p) for p in _folded(self.engine, problems)]

    def _at(self, rule: CompiledEngineRule, release: str) -> Iterator[str]:
        spec = rule.spec
        if spec.plugin is not None:
            since = PLUGIN_SINCE.get(self.engine)
            if since is None:
                yield f"kernelpolicy has no plugin for {self.engine}"
            elif Version(release) < Version(since):
                yield f"kernelpolicy's {self.engine} plugin is tested from {since} only"
        for name, value in spec.env.items():
            yield from self._variable(name, value, release)
        for option, values in flag_options(spec.flags):
            yield from self._option(option, values, release)
        for name, expected in spec.facts.items():
            actual, where = self.table.fact(name, release)
            if name in self.table.fact_names() and actual != expected:
                yield f"the rule expects {name} = {expected!r}; it has {actual!r} ({where})"

    def _variable(self, name: str, value: str, release: str) -> Iterator[str]:
        knob = self.table.env(name, release)
        if knob is None or not knob.defined:
            yield f"sets {name}, which this release does not define"
            return
        if knob.read_in is None:
            yield f"sets {name}, which this release defines but reads nowhere"
            return
        enum = self.table.enum_for(name)
        if enum is not None and value not in (self.table.enum(enum, release) or ()):
            yield f"{name}={value}: not a member of its {enum} enum"
            return
        proven, result = knob.reads_as(value)
        if not proven and enum is None:
            yield f"{name}={value}: its parser was not probed with this value"
        elif refused(result):
            yield f"{name}={value}: its parser refuses the value ({result['error']})"
        elif value in {"0", "1"} and truthy(result) != (value == "1"):
            yield f"{name}={value}: its parser reads it as {result!r}"

    def _option(self, option: str, values: tuple[str, ...], release: str) -> Iterator[str]:
        choices = self.table.option(option, release)
        if choices is None:
            yield f"{option}: this release has no such option"
            return
        enum = self.table.enum_for(option)
        allowed = choices or (self.table.enum(enum, release) if enum else None)
        for value in values:
            if allowed and value not in allowed:
                yield f"{option} {value}: not among its choices ({', '.join(allowed)})"


def _folded(engine: str, problems: list[Problem]) -> list[str]:
    """One line per problem, its releases listed together (``vllm 0.10.0, 0.10.1: ...``)."""
    by_text: dict[str, list[str]] = {}
    for release, text in problems:
        by_text.setdefault(text, []).extend([release] if release else [])
    out = []
    for text, releases in by_text.items():
        if not releases:
            out.append(text)
            continue
        shown = releases if len(releases) <= 4 else [releases[0], "...", releases[-1]]
        count = f" ({len(releases)} releases)" if len(releases) > 4 else ""
        out.append(f"{engine} {', '.join(shown)}{count}: {text}")
    return out
