"""Call-time errors, long and deep rules on the hot path, and disables that remove everything:
each answer is a decision or a ResolutionError, never a raw exception."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpolicy.check.preflight import preflight
from kernelpolicy.engine import ErrorCode, Reason, resolve_policies
from kernelpolicy.errors import PolicyError, ResolutionError
from kernelpolicy.platform.fixtures import fixture_platforms
from kernelpolicy.policy import PolicySet, load_policy_text
from kernelpolicy.policy.cel import evaluate
from tests.helpers import fixture

REPO = Path(__file__).resolve().parent.parent
SCHEMA = 'schema = "kernelpolicy.policy/v1"\n'


def mhc(when: str, *, vendor: str | None = None, extra: str = "") -> str:
    """An ``mhc`` feature whose ``aiter`` candidate holds where ``when`` does."""
    vendor_line = f'vendor = "{vendor}"\n' if vendor else ""
    return (
        f'{SCHEMA}\n[features.mhc]\ndescription = "x"\nfallback = "torch"\n'
        f'context = {{ tokens = "int", flag = "bool" }}\n\n[[features.mhc.candidates]]\n'
        f'impl = "aiter"\n{vendor_line}when = "{when}"\n\n[[features.mhc.candidates]]\n'
        f'impl = "torch"\n{extra}'
    )


GATE = (
    SCHEMA + '\n[gates."g.one"]\ndescription = "x"\ncontext = { tokens = "int" }\n'
    'rule = "4096 / (tokens - 1) > 8"\n'
)


class Weird:
    """A value whose hash, comparison and repr all raise."""

    def __hash__(self) -> int:
        raise ValueError("no hash")

    def __eq__(self, other: object) -> bool:
        raise ValueError("no eq")

    def __repr__(self) -> str:
        raise ValueError("no repr")


# Finding 6: exceptions at call time become ResolutionError naming the call and the context.
@pytest.mark.parametrize(
    ("text", "call", "expected"),
    [
        pytest.param(
            mhc("4096 / (tokens - 1) > 8"),
            lambda r: r.select("mhc", tokens=1, flag=True),
            ["select('mhc')", "tokens=1", "ZeroDivisionError"],
            id="select-division-by-zero",
        ),
        pytest.param(
            mhc("tokens * 9223372036854775807 * 2 > 0"),
            lambda r: r.select("mhc", tokens=1, flag=True),
            ["select('mhc')", "tokens=1", "OverflowError"],
            id="select-overflow",
        ),
        pytest.param(
            GATE,
            lambda r: r.gate("g.one", tokens=1),
            ["gate('g.one')", "tokens=1", "ZeroDivisionError"],
            id="gate-division-by-zero",
        ),
        pytest.param(
            mhc("tokens > 1"),
            lambda r: r.select("mhc", tokens=Weird(), flag=True),
            ["'tokens' must be int", "<Weird object>"],
            id="hash-eq-repr-raise",
        ),
        pytest.param(
            mhc("tokens > 1"),
            lambda r: r.select(Weird(), tokens=1, flag=True),
            ["select(<Weird object>) failed", "ValueError: no eq"],
            id="name-whose-comparison-raises",
        ),
        pytest.param(
            GATE,
            lambda r: r.gate("g" * 100_000),
            ["unknown gate 'ggg", "(cut, 100002 chars)"],
            id="huge-name-is-cut",
        ),
        pytest.param(
            mhc("tokens > 1"),
            lambda r: r.select("mhc", tokens="x" * 100_000, flag=True),
            ["'tokens' must be int", "(cut, 100002 chars)"],
            id="huge-value-is-cut",
        ),
    ],
)
def test_call_time_errors_are_resolution_errors(text: str, call, expected: list[str]) -> None:  # type: ignore[no-untyped-def]
    """ZeroDivisionError, OverflowError and any other exception in a rule or a context value
    reach the caller as one ResolutionError naming the feature or gate and the (cut) context."""
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(text))
    with pytest.raises(ResolutionError) as info:
        call(resolution)
    message = str(info.value)
    for part in expected:
        assert part in message
    assert len(message) < 1000


# Finding 15: [[disable]] entries that leave nothing are an error, and check says so.
DISABLE_TORCH = '\n[[disable]]\nfeature = "mhc"\nimpl = "torch"\nreason = "incident 1"\n'
DISABLE_AITER = '\n[[disable]]\nfeature = "mhc"\nimpl = "aiter"\nreason = "incident 2"\n'


@pytest.mark.parametrize(
    ("extra", "platform", "impl", "code"),
    [
        pytest.param(DISABLE_TORCH, "h100-sxm", None, ErrorCode.ALL_DISABLED, id="fallback-gone"),
        pytest.param(DISABLE_TORCH, "mi300x", "aiter", None, id="fallback-gone-aiter-left"),
        pytest.param(
            DISABLE_TORCH + DISABLE_AITER, "mi300x", None, ErrorCode.ALL_DISABLED, id="all-gone"
        ),
        pytest.param(DISABLE_AITER, "mi300x", "torch", None, id="preferred-gone"),
        pytest.param("", "h100-sxm", "torch", None, id="nothing-disabled"),
    ],
)
def test_disables_that_remove_every_implementation(
    extra: str, platform: str, impl: str | None, code: ErrorCode | None
) -> None:
    """A feature whose usable implementations are all disabled is an error (all_disabled), not
    "not applicable"; with something left, that is chosen."""
    policies = load_policy_text(mhc("tokens > 0", vendor="amd", extra=extra))
    decision = resolve_policies(fixture(platform), {}, policies).decision("mhc")
    assert (decision.impl, decision.error_code) == (impl, code)
    assert (decision.reason is Reason.ERROR) is (code is not None)
    if code is not None:
        assert "incident 1" in (decision.error or "")


def test_check_reports_a_disabled_fallback(tmp_path: Path) -> None:
    """`check` fails on a [[disable]] of the fallback (located at the disable, naming the
    fixtures where nothing is left), and `explain` exits non-zero there."""
    path = tmp_path / "p.toml"
    path.write_text(mhc("tokens > 0", vendor="amd", extra=DISABLE_TORCH))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    check = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "check", "--json", str(path)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert check.returncode == 1, check.stderr
    (issue,) = json.loads(check.stdout)["issues"]
    assert (issue["line"], issue["feature"], issue["key"]) == (16, "mhc", "disable")
    assert "h100-sxm" in issue["message"]
    assert "mi300x" not in issue["message"]  # aiter is still there
    platform = REPO / "kernelpolicy/fixtures/platforms/h100-sxm.json"
    explain = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "explain", "--policies", str(path),
         "--platform", str(platform)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert explain.returncode == 1
    assert "all_disabled" in explain.stdout


# Finding 5: long and deep rules that check accepts resolve on every fixture, compiled to
# Python where Python can take them and through CEL where it cannot.
def chain(op: str, terms: int, operand: str = "tokens") -> str:
    return f" {op} ".join([operand] * terms)


RULES = [
    pytest.param(chain("+", 201) + " > 0", id="201-plus-terms"),
    pytest.param(chain("+", 255) + " > 0", id="255-plus-terms"),
    pytest.param(chain("-", 255) + " < 0", id="255-minus-terms"),
    pytest.param(chain("*", 255) + " >= 0", id="255-products"),
    pytest.param("tokens / " + chain("/", 200, "1") + " > 0", id="200-divisions"),
    pytest.param(chain("&&", 255, "flag"), id="255-and-terms"),
    pytest.param(chain("||", 255, "flag"), id="255-or-terms"),
    pytest.param("!" * 31 + "flag", id="31-not"),
    pytest.param("-" * 30 + "tokens > 0", id="30-minus"),
    pytest.param("(" * 32 + "tokens > 1" + ")" * 32, id="32-parens"),
    pytest.param("tokens > 0" + " == true" * 200, id="200-relations"),
    pytest.param(
        " : ".join(f"tokens == {i} ? flag" for i in range(80)) + " : false",
        id="80-ternaries",
    ),
]
CONTEXTS = [{"tokens": t, "flag": f} for t in (-3, 0, 1, 2, 70) for f in (False, True)]


@pytest.fixture(scope="module")
def platforms() -> list[tuple[str, object]]:
    return fixture_platforms()


@pytest.mark.parametrize("when", RULES)
def test_accepted_rules_resolve_everywhere(when: str, platforms: list[tuple[str, object]]) -> None:
    """What check accepts (load + preflight on every bundled fixture) resolves on each
    fixture, and select() answers as CEL does for every sample context."""
    policies = load_policy_text(mhc(when))
    assert preflight(policies, platforms) == []  # type: ignore[arg-type]
    for _, platform in platforms:
        resolution = resolve_policies(platform, {}, policies)  # type: ignore[arg-type]
        program = policies.features["mhc"].candidate("aiter").when  # type: ignore[union-attr]
        for context in CONTEXTS:
            try:
                expected = "aiter" if evaluate(program, context) else "torch"
            except Exception:
                expected = "error"
            try:
                got = resolution.select("mhc", **context)
            except ResolutionError:
                got = "error"
            assert got == expected, context


@pytest.mark.parametrize(
    "when",
    [
        pytest.param("!" * 300 + "flag", id="300-not"),
        pytest.param("!" * 1000 + "flag", id="1000-not"),
        pytest.param(chain("+", 1000) + " > 0", id="1000-plus-terms"),
    ],
)
def test_rules_python_could_not_take_are_refused_at_load(when: str) -> None:
    """The expressions that gave SyntaxError (too many nested parentheses) or RecursionError
    in resolve() are refused by the loader (and so by check) with the limit named."""
    with pytest.raises(PolicyError, match="MAX_CEL_"):
        load_policy_text(mhc(when))


def test_hot_path_falls_back_to_cel_when_python_refuses() -> None:
    """200 chained relations cannot be compiled by Python (they nest one parenthesis each):
    the feature goes through CEL and answers all the same."""
    policies: PolicySet = load_policy_text(mhc("tokens > 0" + " == true" * 200))
    resolution = resolve_policies(fixture("cpu"), {}, policies)
    assert "mhc" not in resolution._compiled_rules()
    assert resolution.select("mhc", tokens=1, flag=False) == "aiter"
    assert resolution.select("mhc", tokens=0, flag=False) == "torch"


GATED = """
schema = "kernelpolicy.policy/v1"
[features.f]
description = "d"
fallback = "b"
[[features.f.candidates]]
impl = "a"
entry = "kp_no_such_module:fn"
[[features.f.candidates]]
impl = "b"
entry = "json:dumps"
[gates.g]
description = "d"
requires = { feature = "f", impl = "a" }
context = { n = "int" }
rule = "n > 0"
"""


def test_a_gate_turns_false_when_its_implementation_falls_back() -> None:
    """A gate requiring an implementation that failed to load is False afterwards, cached
    answers included: the caller must not keep routing calls to the failed kernel."""
    from kernelpolicy.engine import resolve_policies
    from kernelpolicy.policy import load_policy_text
    from tests.helpers import fixture

    res = resolve_policies(fixture("h100-sxm"), {}, load_policy_text(GATED))
    assert res.gate("g", n=1) is True  # cached from now on
    res.impl("f")  # the module is missing: f falls back to b for the process
    assert res.decision("f").impl == "b"
    assert res.gate("g", n=1) is False
    assert res.gate("g", n=2) is False
