"""Which release of an inference engine the bridge's rules are matched for, and the operator's
variables that release does not read (from the knob tables, :mod:`kernelpolicy.knobs`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from packaging.version import Version

from kernelpolicy.engine.model import CandidateResult, CheckKind, Decision, ErrorCode, Reason
from kernelpolicy.engine.switches import evaluate_switches, force_variable, switch_value
from kernelpolicy.knobs import PREFIXES, KnobTable, knob_table, shipped
from kernelpolicy.limits import shown
from kernelpolicy.policy.compiled import CompiledEngineRule, CompiledFeature, switch_variables
from kernelpolicy.settings import switched_on
from kernelpolicy.versions import StackVersion, parse_version

CHOOSE_HINT = "pass --engine-version to choose"


class MatchedRelease:
    """Which release of ``engine`` the rules are matched for, and the operator's variables that
    release does not read.

    The version given or installed is matched as the release whose code it ships
    (:func:`~kernelpolicy.knobs.shipped`: ``0.32.0rc1`` as 0.32.0); as the newest release of the
    knob tables where it is newer than them, where none is given, or where it cannot be read;
    without tables, where there is none, as a release newer than every version the rules name
    (``named``). :attr:`note` says which, and which releases' knobs stand for a version the
    tables hold only as other builds of its release (``0.8.5`` as 0.8.5.post1), or for one
    between their releases (``0.10.1.1`` checked as 0.10.1, the newest below it, as
    :meth:`reads` reads it; its rules are matched by its own version).

    Attributes:
        given: The release the engine runs, where its version was read: the version given
            or installed as :func:`~kernelpolicy.knobs.shipped` reads it, never clamped to
            the tables (what kernelpolicy's own plugin does in it is asked of this).
        matched: The version the rules' ``versions`` are tested with; None only for an engine
            without tables whose rules name no version.
        known: The tables' release the rules were matched as, or whose knobs stand for a
            version the tables hold only as another build of its release; None where there
            is none (a version between the tables' releases, or no tables).
        checked: The tables' releases the operator's variables are checked against (for a
            version between them, the newest below it); empty: no check.
        note: What was assumed, for the settings' warnings; None where nothing was.
    """

    def __init__(self, engine: str, version: str | None, named: Iterable[Version] = ()) -> None:
        self.engine = engine
        self.table = knob_table(engine)
        parsed = parse_version(version) if version else None
        value = parsed.value if isinstance(parsed, StackVersion) else None
        self.given: Version | None = shipped(value) if value is not None else None
        self.matched: Version | None = self.given
        self.known: str | None = None
        self.checked: tuple[str, ...] = ()
        self.note: str | None = None
        if value is None:
            self._unknown(version, named)
        elif self.table is not None:
            self._match(version or "", value, self.table)

    def _unknown(self, version: str | None, named: Iterable[Version]) -> None:
        """No readable version: the newest release of the tables, or past every version the
        rules name."""
        what = (
            f"{self.engine} not installed here"
            if version is None
            else f"{self.engine} version {shown(version)!r} unreadable"
        )
        if self.table is not None:
            newest = self.table.newest
            self.matched, self.known, self.checked = Version(newest), newest, (newest,)
            self.note = (
                f"{what}: matched as {self.engine} {newest}, the newest release kernelpolicy's "
                f"knob tables know; {CHOOSE_HINT}"
            )
            return
        bounds = [v.release[0] for v in named]
        self.matched = Version(str(max(bounds) + 1)) if bounds else None
        self.note = (
            f"{what}: its rules are matched as for a release newer than every version they "
            f"name; {CHOOSE_HINT}"
        )

    def _match(self, version: str, value: Version, table: KnobTable) -> None:
        """A readable version: the newest release where it is newer than the tables, else its
        release, with the tables' releases its variables are checked against."""
        ships, newest = shipped(value), Version(table.newest)
        if ships > newest:
            self.matched, self.known, self.checked = newest, table.newest, (table.newest,)
            self.note = (
                f"{self.engine} {shown(version)} is newer than the newest release "
                f"kernelpolicy's knob tables know: matched as {table.newest} (regenerate the "
                "tables with scripts/gen_engine_tables.py when a release changes its knobs)"
            )
            return
        # a pre-release or dev build is matched as its release with no note, as a local
        # build is: that is what it ships, not an assumption
        exact = table.known_release(ships)
        self.checked = (exact,) if exact else _same_release(table, ships)
        self.known = self.checked[0] if self.checked else None
        if not exact and self.checked:
            self.note = (
                f"{self.engine} {ships} is not in kernelpolicy's knob tables, which hold its "
                f"release as {' and '.join(self.checked)}: the variables set are checked "
                f"against {'both' if len(self.checked) > 1 else 'its knobs'}"
            )
        elif not exact and (below := _newest_below(table, ships)) is not None:
            # the rules are matched by the version itself; its variables as reads() reads them
            self.checked = (below,)
            self.note = (
                f"{self.engine} {ships} is not in kernelpolicy's knob tables: the variables "
                f"set are checked against {below}'s knobs, the newest release below it "
                "(regenerate the tables with scripts/gen_engine_tables.py to check its own)"
            )

    def reads(self, name: str) -> bool:
        """The release the rules are matched for defines and reads variable ``name``: the
        table's release, or for a version between known releases the newest known below it."""
        table = self.table
        if table is None:
            return False
        release = self.known
        if release is None and self.matched is not None:
            release = _newest_below(table, self.matched)
        knob = table.env(name, release) if release is not None else None
        return knob is not None and knob.defined and knob.read_in is not None

    def unread_request(
        self, feature: CompiledFeature, decision: Decision, env: Mapping[str, str]
    ) -> str | None:
        """The variable whose ``on`` made ``decision`` an error (a switch asked for an
        implementation that is not supported here), where it is one of this engine's own and
        this release does not read it (:meth:`reads`): set for another release, it asks this
        one for nothing, so the switch counts as ``auto`` here. None where the decision is no
        such error, some variable that asked is read, or there are no tables to tell."""
        if decision.error_code is not ErrorCode.REQUIRED_UNSUPPORTED or self.table is None:
            return None
        requested = next((r for r in decision.candidates if r.switch == "on"), None)
        candidate = feature.candidate(requested.impl) if requested is not None else None
        if candidate is None:
            return None
        asking = [
            variable
            for switch in candidate.spec.switches
            if switch.true == "on"
            for variable, value in [switch_value(switch, env)]
            if value is not None and switched_on(env, variable)
        ]
        if not asking or any(not self.table.prefixed(v) or self.reads(v) for v in asking):
            return None
        return asking[0]

    def as_read(
        self,
        feature: CompiledFeature,
        decision: Decision,
        env: Mapping[str, str],
        operator_env: Mapping[str, str],
    ) -> tuple[Decision, str | None]:
        """``decision`` as this release reads the variables that decided it, and the warning
        that says so (None where it is unchanged): an error asked for by a variable of this
        engine the release does not read (:meth:`unread_request`) becomes the first candidate
        accepted here; one that another engine's variables stopped, or a candidate they
        switched off (:meth:`without_others`), what it is without them. ``env`` is what the
        engine will see, ``operator_env`` what the resolution read."""
        asked = self.unread_request(feature, decision, env)
        if asked is not None:
            accepted = next((r.impl for r in decision.candidates if r.accepted), None)
            told = f"{self.engine} is told {accepted}" if accepted else "no candidate is accepted"
            said = (
                f"{feature.name}: {decision.error}; but {self.engine} {self.matched} does not "
                f"read {asked}, so it asks this release for nothing: not blocking; "
                + (told if accepted else f"{told} here")
            )
            return replace(decision, impl=accepted, error=None, error_code=None), said
        other = self.without_others(feature, decision, operator_env)
        if other is None:
            return decision, None
        chosen, variables = other
        return chosen, self.others_note(feature.name, decision, chosen, variables, operator_env)

    def owner(self, name: str) -> str | None:
        """The other engine whose variable ``name`` is (``VLLM_*`` for SGLang, ``SGLANG_*``
        for vLLM, by :data:`~kernelpolicy.knobs.PREFIXES`), which this one never reads; None
        where it is this engine's, no engine's (``KERNELPOLICY_*``), or there are no tables."""
        if self.table is None or self.table.prefixed(name):
            return None
        return next(
            (e for e, p in PREFIXES.items() if e != self.engine and name.startswith(p)), None
        )

    def without_others(
        self, feature: CompiledFeature, decision: Decision, env: Mapping[str, str]
    ) -> tuple[Decision, tuple[str, ...]] | None:
        """``decision`` as it is without the other engines' switch variables set in ``env``
        (:meth:`owner`), and those variables, where they stopped it or switched off a
        candidate it prefers: a variable this engine never reads asks it for nothing. None
        where they changed nothing, or only turned a candidate on (``VLLM_ROCM_USE_AITER`` is
        SGLang's aiter switch too, by the policies' aliases), or the decision was forced.

        Their errors: an implementation they ask for that is not supported here (SGLang told
        VLLM_USE_FLASHINFER_SAMPLER=1 without FlashInfer), a value they cannot read, a switch of
        theirs that disagrees with one of this engine's. Their ``off``: vLLM's
        VLLM_USE_FLASHINFER_SAMPLER=0 does not take SGLang's FlashInfer sampler away, nor
        SGLang's SGLANG_IS_FLASHINFER_AVAILABLE=false vLLM's."""
        theirs = tuple(
            sorted(
                {v for c in feature.candidates for s in c.spec.switches for v in switch_variables(s)
                 if env.get(v, "").strip() and self.owner(v) is not None}
            )
        )  # fmt: skip
        if not theirs or env.get(force_variable(feature.name), "").strip():
            return None
        stopped = decision.error_code in (
            ErrorCode.REQUIRED_UNSUPPORTED, ErrorCode.BAD_ENVIRONMENT, ErrorCode.SWITCH_CONFLICT
        )  # fmt: skip
        if not stopped and (decision.error is not None or decision.reason not in _PREFERENCE):
            return None
        ours = {k: v for k, v in env.items() if k not in theirs}
        impl = _choice(feature, decision.candidates, ours)
        if impl is None or (not stopped and impl == decision.impl):
            return None
        # one choice for the engine: the routes per call were worked out with their variables
        chosen = replace(
            decision, impl=impl or None, error=None, error_code=None,
            order=(impl,) if impl else (), routes=(), dtype_rules=(),
        )  # fmt: skip
        return chosen, theirs

    def others_note(
        self,
        feature: str,
        decision: Decision,
        chosen: Decision,
        variables: tuple[str, ...],
        env: Mapping[str, str],
    ) -> str:
        """The warning for a decision :meth:`without_others` told without ``variables``."""
        said = ", ".join(f"{v}={shown(env[v])}" for v in variables)
        owners = " and ".join(sorted({self.owner(v) or "" for v in variables}))
        one = len(variables) == 1
        before = f"is an error: {decision.error}" if decision.error else f"chose {decision.impl}"
        return (
            f"{feature}: {said} {'is' if one else 'are'} {owners}'s, which {self.engine} "
            f"does not read: {self.engine} is told {chosen.impl or 'no implementation'}, the "
            f"choice without {'it' if one else 'them'} (the resolution, which reads every "
            f"engine's variables, {before})"
        )

    def unread(self, env: Mapping[str, str]) -> list[str]:
        """One warning per variable of this engine set in ``env`` that the release does not
        define, or defines and reads nowhere, with its replacement where the tables know it;
        where two releases stand for it (:attr:`checked`), only what both leave unread."""
        table = self.table
        if table is None or not self.checked:
            return []
        warnings = []
        for name in sorted(n for n in env if table.prefixed(n)):
            knobs = [table.env(name, release) for release in self.checked]
            if any(k is not None and k.defined and k.read_in is not None for k in knobs):
                continue
            if len(knobs) > 1:
                text = (
                    f"{name} is set, but neither {self.engine} {self.checked[0]} nor "
                    f"{self.checked[1]} reads it: it has no effect"
                )
            else:
                what = (
                    "does not define it: it is ignored"
                    if knobs[0] is None or not knobs[0].defined
                    else "defines it but reads it nowhere: it has no effect"
                )
                text = f"{name} is set, but {self.engine} {self.checked[0]} {what}"
            if name in table.replaced:
                text += f"; its replacement: {table.replaced[name]}"
            warnings.append(text)
        return warnings


def named_versions(rules: Iterable[CompiledEngineRule]) -> list[Version]:
    """Every version the ``versions`` of ``rules`` name (a bound, a ``==0.12.*``)."""
    return [
        Version(spec.version.removesuffix(".*"))
        for rule in rules
        if rule.versions is not None
        for spec in rule.versions.parsed
    ]


def _same_release(table: KnobTable, ships: Version) -> tuple[str, ...]:
    """The tables' builds of ``ships``'s release nearest it (X and X.postN), below and above:
    ``0.8.5`` is held as 0.8.5.post1, ``0.5.6.post1`` lies between 0.5.6 and 0.5.6.post2. A
    post release fixes bugs of its release, so its knobs are those of the builds around it."""
    base = Version(ships.base_version)
    same = [r for r in table.releases if Version(Version(r).base_version) == base]
    below = [r for r in same if Version(r) < ships]
    above = [r for r in same if Version(r) > ships]
    return tuple(r for r in (below[-1:] + above[:1]))


def _newest_below(table: KnobTable, version: Version) -> str | None:
    """The newest release of the tables at or below ``version``; None where none is."""
    below = [r for r in table.releases if Version(r) <= version]
    return below[-1] if below else None


_PREFERENCE = (Reason.PREFERRED, Reason.FALLBACK)


def _choice(
    feature: CompiledFeature, results: Iterable[CandidateResult], env: Mapping[str, str]
) -> str | None:
    """The implementation ``choose()`` takes from ``results`` once their switches are read
    from ``env`` ("" where none is accepted), or None where ``env`` itself is the problem (a
    bad value, switches that disagree, a request the platform refuses). A candidate only
    loses its switch-off here, never gains one: a switch ``env`` lacks is unset, and an unset
    switch that is off by default (aiter's) would turn off what another engine's name for it
    turned on."""
    first = ""
    for result, candidate in zip(results, feature.candidates, strict=False):
        outcome = evaluate_switches(candidate.spec.switches, env)
        if result.impl != candidate.impl or outcome.error is not None or outcome.conflict:
            return None
        others = [f for f in result.failures if f.kind is not CheckKind.SWITCH_OFF]
        if outcome.state == "on":  # requested: supported unless the platform says no
            refused = [f for f in others if f.kind is not CheckKind.ROLLOUT]
            return None if refused else result.impl
        off = outcome.state == "off" and len(others) < len(result.failures)
        if not first and not others and not off:
            first = result.impl
    return first
