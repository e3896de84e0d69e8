"""Fuzzing the policy surfaces: policy text (structured and raw bytes), CEL expressions, and the
contexts of select()/gate() calls.

Every property asserts that only the error tree comes out (PolicyError from the loader,
ResolutionError from a call; a valid result is fine too), never another exception, a crash or a
hang. Inputs are bounded in size, so each example is bounded in time, and a hang guard fails a
property that runs for more than a minute instead of stalling CI. The example count comes from
the hypothesis profile (tests/conftest.py: "ci", 300 per property, by default; "release" for the
long run).
"""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernelpolicy.engine import Resolution, resolve_policies
from kernelpolicy.engine.rules import call_variables
from kernelpolicy.errors import PolicyError, ResolutionError
from kernelpolicy.limits import MAX_CEL_DEPTH
from kernelpolicy.policy import load_policies, load_policy_text
from kernelpolicy.policy.cel import compile_expression
from kernelpolicy.policy.transpile import Untranslatable, translate
from tests.helpers import ROOT, bundled, fixture

DOCUMENTS = [p.read_text() for p in sorted((ROOT / "policies").glob("*.toml"))]
HANG_SECONDS = 60


@pytest.fixture(autouse=True)
def hang_guard() -> Iterator[None]:
    """Fail (not stall) a property that hangs: a guard against hangs, not a speed test."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"property ran for over {HANG_SECONDS} s: a hang?")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(HANG_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def assert_clear(text: str) -> None:
    """``text`` loads, or fails with one PolicyError whose issues name the file."""
    try:
        load_policy_text(text, "fuzz.toml")
    except PolicyError as exc:
        issues = exc.issues
    else:
        return
    assert issues
    for issue in issues:
        assert issue.file == "fuzz.toml"
        assert issue.message.strip()


# Policy text, structured.
scalars = st.one_of(
    st.text(max_size=12).map(json.dumps),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(
        ["true", "false", '">=0.1"', '"=>1"', '"*"', '"auto"', '"on"', '"gfx942"', '"sm_90"',
         '"!x"', '"1 +"', '"a && b"', '"4096 / tokens > 8"', '"(((((((((("', "inf", "nan",
         '"tokens * 9223372036854775807 * 2 > 0"', "1979-05-27T07:32:00Z", "0x7fffffff"]
    ),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.dictionaries(
            st.sampled_from(
                ["env", "version", "impl", "x", "true", "unset", "when", "min", "max", "prefer"]
            ),
            inner,
            max_size=3,
        ).map(lambda d: "{ " + ", ".join(f"{k} = {v}" for k, v in d.items()) + " }"),
    ),
    max_leaves=6,
)


@given(doc=st.sampled_from(DOCUMENTS), data=st.data())
def test_replaced_values(doc: str, data: st.DataObject) -> None:
    """Any value of any key replaced by any TOML value gives a clear error or a valid set."""
    lines = doc.splitlines()
    assignments = [
        i
        for i, line in enumerate(lines)
        if "=" in line and not line.lstrip().startswith(("#", "["))
    ]
    index = data.draw(st.sampled_from(assignments))
    lines[index] = f"{lines[index].split('=', 1)[0]}= {data.draw(values)}"
    assert_clear("\n".join(lines))


@given(doc=st.sampled_from(DOCUMENTS), data=st.data())
def test_deleted_duplicated_and_inserted_lines(doc: str, data: st.DataObject) -> None:
    """Deleting, duplicating or inserting lines (keys, headers, deep values) anywhere gives a
    clear error or a valid set."""
    lines = doc.splitlines()
    extra = st.one_of(
        st.builds(
            lambda k, v: f"{k} = {v}", st.from_regex(r"[a-z_]{1,10}", fullmatch=True), values
        ),
        st.integers(1, 2000).map(lambda n: "x = " + "[" * n + "]" * n),
        st.integers(1, 2000).map(lambda n: "x = " + "{a=" * n + "1" + "}" * n),
        st.sampled_from(
            [
                "[features]",
                "[[disable]]",
                "[gates.x]",
                '[features."a b"]',
                "[[",
                '[[features."sampler.top_k_top_p".by_batch]]',
                'prefer = ["torch"]',
                'dtypes = ["float32", "bf16"]',
                "min = 0",
                "max = 2147483648",
            ]
        ),
    )
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["delete", "duplicate", "insert"]))
        if action == "delete":
            del lines[index]
        elif action == "duplicate":
            lines.insert(index, lines[index])
        else:
            lines.insert(index, data.draw(extra))
    assert_clear("\n".join(lines))


@given(text=st.text(max_size=300))
def test_arbitrary_text(text: str) -> None:
    """Arbitrary text (any unicode, lone surrogates included) is a clear error or a valid set."""
    assert_clear(text)


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-policies")


@given(doc=st.sampled_from(DOCUMENTS), data=st.data())
def test_byte_mutations(doc: str, data: st.DataObject, policy_dir: Path) -> None:
    """A policy file with bytes flipped, inserted or cut (invalid UTF-8, NUL, truncation) is a
    clear error or a valid set, read through the bounded reader."""
    raw = bytearray(doc.encode())
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(raw) - 1))
        action = data.draw(st.sampled_from(["flip", "insert", "truncate"]))
        if action == "flip":
            raw[index] = data.draw(st.integers(0, 255))
        elif action == "insert":
            raw[index:index] = data.draw(st.binary(min_size=1, max_size=8))
        else:
            del raw[index:]
            if not raw:
                break
    path = policy_dir / "mutated.toml"
    path.write_bytes(bytes(raw))
    try:
        load_policies([path])
    except PolicyError as exc:
        issues = exc.issues
    else:
        return
    assert all(issue.file == str(path) for issue in issues)


# CEL expressions.
cel_tokens = st.one_of(
    st.sampled_from(
        ["(", ")", "[", "]", "!", "-", "+", "*", "/", "%", "&&", "||", "==", "!=", "<", "<=",
         ">", ">=", "?", ":", ",", ".", "in", "true", "false", "null", "tokens", "flag", "dtype",
         "vendor", "arch", "dtype_size(dtype)", "size(", "0", "1", "0.5", "1u", "0x10",
         "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1e308",
         '"bfloat16"', "'('", '"""x"""', "r'\\d'", "b'x'", "\\", "{", "}", "'unterminated"]
    ),
    st.integers(-(2**70), 2**70).map(str),
    st.text(max_size=4).map(json.dumps),
    st.text(alphabet=st.characters(min_codepoint=0x80), max_size=3),
)  # fmt: skip
shapes = st.one_of(
    st.lists(cel_tokens, max_size=40).map(" ".join),
    st.integers(0, 3 * MAX_CEL_DEPTH).map(lambda n: "(" * n + "tokens > 0" + ")" * n),
    st.integers(0, 3 * MAX_CEL_DEPTH).map(lambda n: "!" * n + "flag"),
    st.integers(1, 700).map(lambda n: " + ".join(["tokens"] * n) + " > 0"),
    st.integers(1, 300).map(lambda n: "tokens > 0" + " == true" * n),
    st.integers(1, 90).map(lambda n: " : ".join(["flag ? tokens > 1"] * n) + " : false"),
)
DECLARED = {"tokens": "int", "flag": "bool", "dtype": "string"}


@given(source=shapes)
def test_cel_expressions(source: str) -> None:
    """Token soups, deep parentheses, long chains, huge integers and unicode: compiling is a
    ValueError or a program, translating is Untranslatable or Python; never a crash."""
    with contextlib.suppress(ValueError):
        compile_expression(source, DECLARED)
    with contextlib.suppress(Untranslatable):
        translate(source, {"vendor": "amd", "arch": "gfx942"}, set(DECLARED))


def policy_with(when: str) -> str:
    escaped = when.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return (
        'schema = "kernelpolicy.policy/v1"\n[features.mhc]\ndescription = "x"\n'
        'fallback = "torch"\ncontext = { tokens = "int", flag = "bool", dtype = "string" }\n'
        f'[[features.mhc.candidates]]\nimpl = "aiter"\nwhen = "{escaped}"\n'
        '[[features.mhc.candidates]]\nimpl = "torch"\n'
    )


# Call contexts of select() and gate().
leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-(2**100), 2**100),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20), st.binary(max_size=8),
    st.sampled_from(["bfloat16", "float16", "raw_logprobs", "processed_logits", "x" * 5000]),
    st.just(object()), st.just(float), st.just(Ellipsis),
)  # fmt: skip
call_values = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner)),
    max_leaves=4,
)


@given(
    source=shapes, context=st.fixed_dictionaries({}, optional=dict.fromkeys(DECLARED, call_values))
)
def test_cel_in_a_policy_and_at_call_time(source: str, context: dict[str, Any]) -> None:
    """A fuzzed `when` loads or is a PolicyError; where it loads, select() with a fuzzed context
    answers an implementation or raises ResolutionError."""
    try:
        policies = load_policy_text(policy_with(source))
    except PolicyError:
        return
    resolution = resolve_policies(fixture("cpu"), {}, policies)
    with contextlib.suppress(ResolutionError):
        assert resolution.select("mhc", **context) in {"aiter", "torch"}


@cache
def resolutions() -> tuple[Resolution, ...]:
    aiter = {"VLLM_ROCM_USE_AITER": "1", "SGLANG_USE_AITER": "1"}
    return (
        resolve_policies(fixture("h100-sxm"), {}, bundled()),
        resolve_policies(fixture("mi355x"), aiter, bundled()),
        resolve_policies(fixture("cpu"), {}, bundled()),
    )


NAMES = [
    "sampler.top_k_top_p", "sampler.greedy", "allreduce_rmsnorm", "mhc", "sparse_attn_indexer",
    "topk_per_row", "allreduce_rmsnorm.one_stage", "nope", "",
]  # fmt: skip
# Keywords each function takes: the variables the pack declares for features (select) and
# gates (gate). Any other keyword is Python's own TypeError, by design (tested elsewhere).
SELECT_KEYS = sorted({v for f in bundled().features.values() for v in call_variables(f)})
GATE_KEYS = sorted({v for g in bundled().gates.values() for v in g.spec.context})


@given(
    which=st.integers(0, 2),
    kind=st.sampled_from(["select", "gate"]),
    name=st.one_of(st.sampled_from(NAMES), call_values),
    data=st.data(),
)
def test_select_and_gate_contexts(which: int, kind: str, name: Any, data: st.DataObject) -> None:
    """select()/gate() with random names, types and values: an answer or ResolutionError."""
    resolution = resolutions()[which]
    call = resolution.select if kind == "select" else resolution.gate
    keys = SELECT_KEYS if kind == "select" else GATE_KEYS
    context = data.draw(st.dictionaries(st.sampled_from(keys), call_values, max_size=len(keys)))
    with contextlib.suppress(ResolutionError):
        call(name, **context)


ROUTED = """schema = "kernelpolicy.policy/v1"
[features."fuzz.routed"]
description = "d"
fallback = "c"
dtypes = ["float32", "bfloat16", "float16"]
[[features."fuzz.routed".candidates]]
impl = "a"
entry = "kernelpolicy.kernels.torch_impl:top_k_top_p"
torch = ">=1.0"
[[features."fuzz.routed".candidates]]
impl = "b"
entry = "kernelpolicy.kernels.torch_impl:top_k_top_p"
torch = ">=1.0"
[[features."fuzz.routed".candidates]]
impl = "c"
entry = "kernelpolicy.kernels.torch_impl:top_k_top_p"
"""
rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(-2, 2**31 + 1)),
        st.one_of(st.none(), st.integers(-2, 2**31 + 1)),
        st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=4),
    ),
    max_size=5,
)


def _row(low: int | None, high: int | None, prefer: list[str]) -> str:
    keys = [f"prefer = {json.dumps(prefer)}"]
    keys += [f"min = {low}"] * (low is not None) + [f"max = {high}"] * (high is not None)
    return '[[features."fuzz.routed".by_batch]]\n' + "\n".join(keys) + "\n"


@given(table=rows, batches=st.lists(st.integers(-3, 2**31 + 3), min_size=1, max_size=8))
def test_batch_rows(
    table: list[tuple[int | None, int | None, list[str]]], batches: list[int]
) -> None:
    """Any by_batch rows load or give a clear error; where they load, the compiled select(),
    the CEL path and the order the dispatcher uses agree for any batch."""
    text = ROUTED + "".join(_row(*row) for row in table)
    try:
        policies = load_policy_text(text, "fuzz.toml")
    except PolicyError as exc:
        issues = exc.issues
    else:
        issues = []
    if issues:
        assert all(issue.file == "fuzz.toml" and issue.message for issue in issues)
        return
    resolution = resolve_policies(fixture("cpu"), {}, policies)
    decision = resolution.decision("fuzz.routed")
    for batch in batches:
        expected = decision.order_for(batch, "float32")[0]
        # batch is a keyword only where by_batch rows exist (Python's TypeError otherwise)
        context = {"batch": batch} if table else {}
        assert resolution.select("fuzz.routed", dtype="float32", **context) == expected
        assert resolution._select_miss({}, "fuzz.routed", None, context) == expected
