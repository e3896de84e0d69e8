"""Each feature's ``select`` rule compiled to the lines of a Python body (the hot path's fast
case), per-call routing by ``batch`` and ``dtype`` included.

Each candidate's ``when`` is translated to Python with the platform facts inlined, and used
only if it agrees with the CEL program on a grid of sample contexts. A feature with an error
decision, or a condition outside the translatable subset, has no body and goes through the
cache and CEL (``Resolution._select_miss``), which decide the same.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernelpolicy.code_cache import keep_text, kept_text
from kernelpolicy.digest import file_stamps
from kernelpolicy.dtypes import ROUTING_VARIABLES
from kernelpolicy.engine.hotpath import type_guard
from kernelpolicy.engine.model import Decision, DtypeRule
from kernelpolicy.engine.string_memos import StringTests, first_sight
from kernelpolicy.policy.cel import evaluate, extension_stamp
from kernelpolicy.policy.compiled import CompiledFeature, PolicySet


def routing_variables(feature: CompiledFeature) -> dict[str, str]:
    """The routing variables a feature uses (``batch`` for ``by_batch``, ``dtype`` for
    ``dtypes``) that its ``context`` does not declare: optional in a call."""
    used = {"batch": bool(feature.spec.by_batch), "dtype": bool(feature.spec.dtypes)}
    return {
        name: kind
        for name, kind in ROUTING_VARIABLES.items()
        if used[name] and name not in feature.spec.context
    }


def call_variables(feature: CompiledFeature) -> dict[str, str]:
    """Every variable a call of ``feature`` may give: its ``context`` (required) and the
    routing variables it takes optionally. Front-ends (gRPC, OFREP, flagd) pass these on."""
    return {**feature.spec.context, **routing_variables(feature)}


def namespace() -> dict[str, Any]:
    """What the generated bodies may call."""
    from kernelpolicy.policy.cel import dtype_size
    from kernelpolicy.policy.transpile import HELPERS

    return {
        **HELPERS, "_dtype_size": dtype_size, "_first_sight": first_sight, "type": type,
        "str": str, "int": int, "float": float,
    }  # fmt: skip


def compiled_rules(
    policies: PolicySet,
    decisions: Mapping[str, Decision],
    static: Mapping[str, object],
    scope: dict[str, Any],
) -> dict[str, list[str]]:
    """Feature -> the lines of a Python body that returns the implementation for a call; the
    memos of its string tests go into ``scope``, where the body runs."""
    rules: dict[str, list[str]] = {}
    for index, (name, decision) in enumerate(decisions.items()):
        if decision.error is not None or not decision.order:
            continue
        feature = policies.features[name]
        declared = feature.spec.context
        strings = StringTests(str(index), (v for v, kind in declared.items() if kind == "string"))
        try:
            chain = _Chain(feature, decision, static, scope)
            body = strings.rewrite(_routed(decision, chain, feature))
        except Exception:  # Untranslatable, or Python refusing the translation
            continue  # (too many nested parentheses, RecursionError): CEL decides, as verified
        # Booleans are taken by truthiness, as a hand-written rule would; other kinds are
        # guarded (None for a string must not quietly pick a kernel), a string read only by
        # tests against literals by its tests' memos (engine.string_memos). A guard, a memo or
        # the body failing sends the call through the cache and CEL, which raise with the
        # details.
        guards = " and ".join(
            type_guard(v, kind)
            for v, kind in declared.items()
            if kind != "bool" and (kind != "string" or v in strings.guarded)
        )
        rules[name] = [*strings.prelude(scope), f"if {guards or 'True'}:", *_indent(body, 4)]
    return rules


def _indent(lines: list[str], width: int) -> list[str]:
    return [" " * width + line for line in lines]


class _Chain:
    """The ``if <when>: return impl`` lines of one order, each ``when`` translated once."""

    def __init__(
        self,
        feature: CompiledFeature,
        decision: Decision,
        static: Mapping[str, object],
        scope: Mapping[str, Any],
    ) -> None:
        self._feature = feature
        self._static = static
        self._scope = scope
        self._python: dict[str, str | None] = {}
        self._rules = {rule.impl: rule for rule in decision.dtype_rules}

    def lines(self, order: tuple[str, ...], by_dtype: bool) -> list[str]:
        lines = []
        for impl in order:
            conditions = []
            rule = self._rules.get(impl) if by_dtype else None
            if rule is not None:
                conditions.append(_dtype_condition(rule))
            python = self._when(impl)
            if python is not None:
                conditions.append(f"({python})")
            if not conditions:
                lines.append(f"return {impl!r}")
                break
            lines.append(f"if {' and '.join(conditions)}: return {impl!r}")
        return lines

    def _when(self, impl: str) -> str | None:
        if impl not in self._python:
            self._python[impl] = self._translate(impl)
        return self._python[impl]

    def _translate(self, impl: str) -> str | None:
        from kernelpolicy.policy.transpile import Untranslatable, fold, translate, verify

        candidate = self._feature.candidate(impl)
        if candidate is None or candidate.when is None:
            return None
        declared = self._feature.spec.context
        source = candidate.spec.when or ""
        key = _translation_key(source, self._static, declared)
        kept = kept_text(key)
        if kept is not None:  # verified by an earlier process from the same inputs
            return kept
        python = fold(translate(source, self._static, set(declared)))
        reference = functools.partial(_evaluate_with, candidate.when, self._static)
        if not verify(python, reference, declared, source, dict(self._scope)):
            raise Untranslatable(f"{self._feature.name}/{impl}: translation disagrees with CEL")
        keep_text(key, python)
        return python


def _translation_key(source: str, static: Mapping[str, object], declared: Mapping[str, str]) -> str:
    """Everything a verified translation depends on: the expression, the platform facts it
    inlines, the declared types, and the translator's and CEL's code (:func:`_translator`)."""
    parts = (_translator(), source, repr(sorted(static.items())), repr(sorted(declared.items())))
    return "\0".join(parts)


@functools.lru_cache(maxsize=1)
def _translator() -> str:
    """kernelpolicy's translator and CEL binding (the compiled-code cache keeps a file per
    kernelpolicy version; these files' stamps cover an edit within one) and the CEL extension,
    read once per process."""
    package = Path(__file__).resolve().parent.parent
    code = [package / "policy" / "transpile.py", package / "policy" / "cel.py", Path(__file__)]
    return f"translation 1\0{file_stamps(package, code)}\0{extension_stamp()}"


def _dtype_condition(rule: DtypeRule) -> str:
    """Generated from dtype names only (a closed set, or a torch dtype's own name)."""
    parts = []
    if rule.serves is not None:
        parts.append(f"dtype in {tuple(rule.serves)!r}")
    if rule.refuses:
        parts.append(f"dtype not in {tuple(rule.refuses)!r}")
    return " and ".join(parts)


def _routed(decision: Decision, chain: _Chain, feature: CompiledFeature) -> list[str]:
    """The body: by batch range and dtype when the call gives them (the common case), the
    policy's order when it gives neither; a mix, or a value of another type (a torch dtype),
    goes through the cache and CEL, which convert and check it.

    Only what routes here is looked at: on a platform where the rows change nothing and no
    evidence limits a dtype, the body is the plain chain (``select()`` stays within its budget
    of a hand-written rule), and a routing value is checked only on the cache path.
    """
    used = ["batch"] * bool(decision.routes) + ["dtype"] * bool(decision.dtype_rules)
    if not used:
        return chain.lines(decision.order, False)
    by_dtype = bool(decision.dtype_rules)
    given = " and ".join(type_guard(v, ROUTING_VARIABLES[v]) for v in used)
    lines = [f"if {given}:"]
    for route in decision.routes:
        upper = "" if route.high is None else f" <= {route.high}"
        lines.append(f"    if {route.low} <= batch{upper}:")
        lines += _indent(chain.lines(route.order, by_dtype), 8)
    lines += _indent(chain.lines(decision.order, by_dtype), 4)
    if all(v in routing_variables(feature) for v in used):
        lines.append(f"if {' and '.join(f'{v} is _M' for v in used)}:")
        lines += _indent(chain.lines(decision.order, False), 4)
    return lines


def _evaluate_with(
    program: Any, static: Mapping[str, object], context: Mapping[str, object]
) -> bool:
    return evaluate(program, {**static, **context})
