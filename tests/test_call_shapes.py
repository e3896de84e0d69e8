"""What select() and gate() raise, call by call, and that docs/policy-limits.md says the same
(issue 24: the page promised ResolutionError "whatever the call passes", while a keyword no
policy declares is Python's TypeError, the price of a hot path without a dict per call)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.errors import ResolutionError
from tests.helpers import ROOT, resolve_on

TOPK = "sampler.top_k_top_p"
CALL: dict[str, Any] = {
    "has_generators": False,
    "has_top_k": True,
    "has_top_p": True,
    "logprobs_mode": "raw_logprobs",
}
GATE = "allreduce_rmsnorm.one_stage"
GATE_CALL: dict[str, Any] = {
    "dtype": "bfloat16",
    "hidden_dim": 4096,
    "tokens": 8,
    "world_size": 2,
    "total_bytes": 1,
    "fully_connected": True,
}


class _BadEq:
    """Hashes like "raw_logprobs" (so that a cache lookup compares it) and raises on ``==``."""

    def __hash__(self) -> int:
        return hash("raw_logprobs")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing me")


Call = Callable[[Resolution], object]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        pytest.param(
            lambda r: r.select(TOPK, temperature=0.7, **CALL), TypeError,
            id="select-undeclared-keyword",
        ),
        pytest.param(
            lambda r: r.gate(GATE, temperature=0.7, **GATE_CALL), TypeError,
            id="gate-undeclared-keyword",
        ),
        pytest.param(lambda r: r.select(TOPK, False, True), TypeError, id="context-by-position"),
        pytest.param(lambda r: r.select(), TypeError, id="no-name"),
        pytest.param(lambda r: r.select("no.such", **CALL), ResolutionError, id="unknown-feature"),
        pytest.param(lambda r: r.gate("no.such"), ResolutionError, id="unknown-gate"),
        pytest.param(
            lambda r: r.select(TOPK, has_generators=False), ResolutionError, id="missing-variable"
        ),
        pytest.param(
            lambda r: r.select(TOPK, **{**CALL, "logprobs_mode": 3}), ResolutionError,
            id="wrong-type",
        ),
        pytest.param(
            lambda r: r.select(TOPK, **{**CALL, "logprobs_mode": ["x"]}), ResolutionError,
            id="unhashable",
        ),
        pytest.param(
            lambda r: [r.select(TOPK, **c) for c in (CALL, {**CALL, "logprobs_mode": _BadEq()})],
            ResolutionError, id="eq-raises-in-the-cache",
        ),
        pytest.param(
            lambda r: r.gate(GATE, **{**GATE_CALL, "tokens": 2**70}), None, id="huge-int-answers"
        ),
    ],
)  # fmt: skip
def test_what_each_call_raises(call: Call, error: type[BaseException] | None) -> None:
    """A call Python cannot bind is a TypeError; every value a bound call passes ends in an
    answer or a ResolutionError."""
    resolution = resolve_on("mi355x", VLLM_ROCM_USE_AITER="1")
    if error is None:
        call(resolution)
        return
    with pytest.raises(error) as info:
        call(resolution)
    if error is TypeError:
        assert not isinstance(info.value, ResolutionError)


def test_the_limits_page_says_so() -> None:
    """docs/policy-limits.md promises ResolutionError for values only, and names the TypeError
    of a keyword no policy declares, in the text and in its table of errors."""
    text = (ROOT / "docs/policy-limits.md").read_text()
    assert "ResolutionError`, whatever the call passes" not in text
    assert "whatever values the call passes" in text
    assert "a keyword that no policy declares" in text
    row = next(line for line in text.splitlines() if line.startswith("| `select()`, `gate()` |"))
    assert "`TypeError` for a keyword no policy declares" in row
