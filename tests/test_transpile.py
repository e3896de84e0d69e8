"""CEL -> Python for the hot path: same answers as CEL, or no translation at all."""

from __future__ import annotations

import pytest

from kernelpolicy.policy.cel import cel_module, dtype_size
from kernelpolicy.policy.transpile import (
    HELPERS,
    Untranslatable,
    fold,
    tokens,
    translate,
    verify,
)

NAMESPACE = {**HELPERS, "_dtype_size": dtype_size}


@pytest.mark.parametrize(
    ("source", "static", "python"),
    [
        pytest.param("!a && (b || c)", {}, "not a and (b or c)", id="boolean"),
        pytest.param('m in ["x", "y"]', {}, "m in ('x', 'y')", id="in-list"),
        pytest.param(
            '!(arch == "gfx950" && n < 16384)',
            {"arch": "gfx950"},
            "not n < 16384",
            id="static-folded-true",
        ),
        pytest.param(
            '!(arch == "gfx950" && n < 16384)', {"arch": "gfx942"}, "True", id="static-folded-false"
        ),
        pytest.param(
            "n % (16 / 2) == 0", {}, "_cel_mod(n, _cel_div(16, 2)) == 0", id="integer-arithmetic"
        ),
        pytest.param("a ? n > 1 : n < 1", {}, "n > 1 if a else n < 1", id="ternary"),
        pytest.param("dtype_size(d) == 2", {}, "_dtype_size(d) == 2", id="function"),
    ],
)
def test_translate(source: str, static: dict[str, object], python: str) -> None:
    """The subset translates to the expected Python, static facts inlined and folded."""
    assert fold(translate(source, static, {"a", "b", "c", "m", "n", "d"})) == python


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("size(m) > 1", id="other-function"),
        pytest.param("m.startsWith('x')", id="member-call"),
        pytest.param("[1, 2].exists(x, x > 1)", id="macro"),
        pytest.param("n > 1u", id="unsigned"),
        pytest.param("q > 1", id="unknown-variable"),
        pytest.param("n >", id="syntax"),
    ],
)
def test_untranslatable(source: str) -> None:
    """Outside the subset: Untranslatable, and the caller keeps CEL."""
    with pytest.raises(Untranslatable):
        translate(source, {}, {"m", "n"})


@pytest.mark.parametrize(("a", "b"), [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 3)])
def test_integer_division_and_modulo_match_cel(a: int, b: int) -> None:
    """CEL truncates toward zero; the helpers do too (Python's // floors)."""
    cel = cel_module()
    assert HELPERS["_cel_div"](a, b) == cel.evaluate(f"{a} / {b}")
    assert HELPERS["_cel_mod"](a, b) == cel.evaluate(f"{a} % {b}")


def test_verify_rejects_a_wrong_translation() -> None:
    """A translation that disagrees with CEL anywhere on the grid is refused."""
    program = cel_module().compile("n < 16384")

    def reference(context: dict[str, object]) -> bool:
        return bool(program.execute(context))

    assert verify("n < 16384", reference, {"n": "int"}, "n < 16384", NAMESPACE)
    assert not verify("n <= 16384", reference, {"n": "int"}, "n < 16384", NAMESPACE)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            'n >= 1.5 && m == "x"',
            [("ident", "n"), ("op", ">="), ("double", "1.5"), ("op", "&&"), ("ident", "m"),
             ("op", "=="), ("string", '"x"')],
            id="every-kind",
        ),
        pytest.param("  n % 16  ", [("ident", "n"), ("op", "%"), ("int", "16")], id="spaces"),
        pytest.param("", [], id="empty"),
    ],
)  # fmt: skip
def test_tokens(source: str, expected: list[tuple[str, str]]) -> None:
    """The tokens the parser reads and cel.py names a type error's operands from."""
    assert tokens(source) == expected


@pytest.mark.parametrize(
    "source", [pytest.param("n > 1u", id="unsigned"), pytest.param("n # 1", id="stray")]
)
def test_tokens_outside_the_subset(source: str) -> None:
    """What the subset cannot read is Untranslatable, which cel.py's caller catches."""
    with pytest.raises(Untranslatable):
        tokens(source)
