"""A compiled rule's tests of a string variable answered by memos (engine.string_memos): the
rewrite, the bound, and select() answering as CEL does for every kind of value."""

from __future__ import annotations

import pytest

from kernelpolicy.engine.hotpath import hot_path
from kernelpolicy.engine.string_memos import StringTests, first_sight
from kernelpolicy.errors import ResolutionError
from kernelpolicy.limits import MAX_STRING_MEMO_ENTRIES
from tests.helpers import resolve_on

TOPK = "sampler.top_k_top_p"
AITER = {"VLLM_ROCM_USE_AITER": "1"}
CALL = {"has_generators": False, "has_top_k": True, "has_top_p": True}


class Text(str):
    """A str subclass: CEL decides for it, as it did behind the type guard."""


class Twin:
    """Not a str, but equal to one, hash included: the guard sent it to CEL (refused)."""

    def __hash__(self) -> int:
        return hash("processed_logits")

    def __eq__(self, other: object) -> bool:
        return other == "processed_logits"


@pytest.mark.parametrize(
    ("body", "rewritten", "guarded"),
    [
        pytest.param(
            ["if not m in ('a', 'b'): return 'x'"],
            ["if not _s0_0:", "    return 'x'"],
            set(),
            id="in-a-tuple",
        ),
        pytest.param(
            ["if m not in ['a']: return 'x'", "if m == 'c' or m != 'd': return 'y'"],
            [
                "if not _s0_0:",
                "    return 'x'",
                "if _s0_1 or not _s0_2:",
                "    return 'y'",
            ],
            set(),
            id="not-in-a-list-eq-ne",
        ),
        pytest.param(
            ["if m in ('a',) and m + 'z' == 'az': return 'x'"],
            ["if m in ('a',) and m + 'z' == 'az': return 'x'"],
            {"m"},
            id="read-otherwise-keeps-its-guard",
        ),
        pytest.param(
            ["if m in ('a', 1): return 'x'"],
            ["if m in ('a', 1): return 'x'"],
            {"m"},
            id="a-literal-that-is-not-a-string",
        ),
        pytest.param(
            ["if m < 'b': return 'x'"], ["if m < 'b': return 'x'"], {"m"}, id="an-order-test"
        ),
        pytest.param(["return 'x'"], ["return 'x'"], {"m"}, id="unread-keeps-its-guard"),
    ],
)
def test_tests_of_a_string_read_only_by_tests_become_lookups(
    body: list[str], rewritten: list[str], guarded: set[str]
) -> None:
    tests = StringTests("0", ["m"])
    assert tests.rewrite(body) == rewritten
    assert tests.guarded == guarded


def test_the_prelude_answers_each_test_from_its_memo() -> None:
    tests = StringTests("3", ["m"])
    body = tests.rewrite(["if m in ('a', 'b'): return 'x'", "return 'y'"])
    scope: dict[str, object] = {"_first_sight": first_sight}
    source = "\n".join(["def f(m):", *("    " + line for line in [*tests.prelude(scope), *body])])
    exec(source, scope)
    f = scope["f"]
    assert [f("a"), f("b"), f("c"), f("c")] == ["x", "x", "y", "y"]  # type: ignore[operator]
    assert scope["_m3_0"] == {"a": True, "b": True, "c": False}
    for wrong in (None, 5, b"a", Text("d")):  # a str subclass not met yet: CEL decides
        with pytest.raises(TypeError, match="expected a string"):
            f(wrong)  # type: ignore[operator]
    assert f(Text("a")) == "x"  # equal to a string met: answered as that string, as CEL does


def test_a_memo_keeps_a_bounded_number_of_strings() -> None:
    memo: dict[str, bool] = {}
    for n in range(MAX_STRING_MEMO_ENTRIES + 10):
        assert first_sight(memo, f"v{n}", ("v3",)) is (n == 3)
    assert len(memo) == MAX_STRING_MEMO_ENTRIES
    assert first_sight(memo, "v3", ("v3",)) is True


def test_the_budget_case_has_no_type_guard_left() -> None:
    """The sampler's rule reads logprobs_mode only in a test: its memo replaces the guard."""
    body = "\n".join(resolve_on("mi355x", **AITER)._compiled_rules()[TOPK])
    assert "_first_sight" in body
    assert "type(logprobs_mode)" not in body


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("raw_logprobs", id="a-string-outside"),
        pytest.param("processed_logits", id="a-string-inside"),
        pytest.param("", id="empty"),
        pytest.param(Text("processed_logits"), id="str-subclass"),
        pytest.param(None, id="none"),
        pytest.param(5, id="an-int"),
        pytest.param(b"raw_logprobs", id="bytes"),
        pytest.param(["raw_logprobs"], id="unhashable"),
    ],
)
@pytest.mark.parametrize("generators", [False, True], ids=["no-generators", "generators"])
def test_select_answers_as_cel_for_every_value(mode: object, generators: bool) -> None:
    """Twice each (the second from the memo): the same answer or the same error as the
    cache-and-CEL path, which is the reference."""
    ours = resolve_on("mi355x", **AITER)
    reference = resolve_on("mi355x", **AITER)
    reference.select = hot_path("select", {TOPK: (*CALL, "logprobs_mode")}, reference._select_miss)
    call = {**CALL, "has_generators": generators, "logprobs_mode": mode}
    for _ in range(2):
        try:
            expected: object = reference.select(TOPK, **call)
        except ResolutionError as exc:
            expected = str(exc)
        try:
            got: object = ours.select(TOPK, **call)
        except ResolutionError as exc:
            got = str(exc)
        assert got == expected


def test_a_value_equal_to_a_string_met_is_answered_as_that_string() -> None:
    """The documented limit of a memo (engine.string_memos): once "processed_logits" was met,
    an object that hashes and compares as it is answered as it (torch), where CEL refuses it
    for not being a string; before the string is met, CEL refuses it here too."""
    ours = resolve_on("mi355x", **AITER)
    call = {**CALL, "logprobs_mode": Twin()}
    with pytest.raises(ResolutionError, match="must be string"):
        ours.select(TOPK, **call)
    assert ours.select(TOPK, **{**CALL, "logprobs_mode": "processed_logits"}) == "torch"
    assert ours.select(TOPK, **call) == "torch"
