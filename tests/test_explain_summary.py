"""explain's summary words and hints: what they say must be true of the platform shown."""

from __future__ import annotations

import re

import pytest

from kernelpolicy.cli import main
from tests.helpers import FIXTURES


def _explain(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """explain's table, runs of spaces squeezed to two."""
    main(["explain", *argv])
    return re.sub(r" {2,}", "  ", capsys.readouterr().out)


@pytest.mark.parametrize(
    ("fixture", "why"),
    [
        pytest.param("cpu", "fallback: aiter rejected (no GPU)", id="no-gpu"),
        pytest.param("h100-sxm", "fallback: aiter rejected (for another vendor's GPU)",
                     id="nvidia-gpu"),
        pytest.param("mi300x", "fallback: aiter rejected (below)", id="amd-gpu-switched-off"),
    ],
)  # fmt: skip
def test_fallback_says_why_in_a_word(
    fixture: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fallback whose candidates need a GPU of a vendor this machine lacks: "no GPU" where
    the platform has none (its detail says "found no GPU"), another vendor's where it has one."""
    out = _explain(["sampler.greedy", "--platform", str(FIXTURES / f"{fixture}.json")], capsys)
    assert f"\nsampler.greedy  torch  {why}\n" in out
