"""env and exec's error report: each error once, with its hints, however many features share it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernelpolicy.cli import main
from kernelpolicy.cli.env_cmd import report_errors
from tests.helpers import FIXTURES

BAD = "X='on?' is not a boolean: expected 1/0"


def _resolution(**hints: tuple[str, ...]) -> SimpleNamespace:
    """A stand-in with a decision per feature that is an error with these hints."""
    return SimpleNamespace(
        decisions={n: SimpleNamespace(error="bad", hints=h) for n, h in hints.items()}
    )


@pytest.mark.parametrize(
    ("errors", "hints", "expected"),
    [
        pytest.param((f"a: {BAD}",), {}, [f"kernelpolicy: error: a: {BAD}"], id="one-feature"),
        pytest.param(
            (f"a: {BAD}", f"b.c: {BAD}", f"d: {BAD}"), {},
            [f"kernelpolicy: error: {BAD}; for 3 features: a, b.c, d"], id="shared-said-once",
        ),
        pytest.param(
            (f"a: {BAD}", "b: needs Y=1, but a needs Y=0", f"c: {BAD}"), {},
            [f"kernelpolicy: error: {BAD}; for 2 features: a, c",
             "kernelpolicy: error: b: needs Y=1, but a needs Y=0"],
            id="shared-and-another",
        ),
        pytest.param(
            (f"a: {BAD}", f"b: {BAD}"), {"a": ("set X=1",), "b": ("set X=1", "or X=0")},
            [f"kernelpolicy: error: {BAD}; for 2 features: a, b", "  hint: set X=1",
             "  hint: or X=0"],
            id="hints-once-each",
        ),
        pytest.param(("no feature named",), {}, ["kernelpolicy: error: no feature named"],
                     id="no-feature-prefix"),
    ],
)  # fmt: skip
def test_report_errors(
    errors: tuple[str, ...],
    hints: dict[str, tuple[str, ...]],
    expected: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One line per distinct error, naming the features it is the error of; hints follow it,
    each once."""
    report_errors(_resolution(**hints), errors)
    assert capsys.readouterr().err.splitlines() == expected


def test_a_bad_switch_value_is_one_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`env --env VLLM_ROCM_USE_AITER=enabled`: the many aiter features it switches share one
    error line (it was one line per feature), exit 1."""
    mi300x = str(FIXTURES / "mi300x.json")
    argv = ["env", "--engine", "vllm", "--platform", mi300x, "--env", "VLLM_ROCM_USE_AITER=enabled"]
    assert main(argv) == 1
    errors = [
        e for e in capsys.readouterr().err.splitlines() if e.startswith("kernelpolicy: error")
    ]
    assert len(errors) == 1
    assert errors[0].startswith(
        "kernelpolicy: error: VLLM_ROCM_USE_AITER='enabled' is not a boolean: expected 1/0"
    )
    assert " features: " in errors[0]
    assert "sampler.top_k_top_p" in errors[0].split(" features: ")[1].split(", ")
