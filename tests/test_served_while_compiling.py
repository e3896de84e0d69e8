"""A call whose kernel is compiling is served by the next ready candidate, and never raises
because of it (kernelpolicy/engine/dispatch.py ``Serving._elsewhere``): a next candidate that
fails on that call (its own build failed, its library cannot be imported, a launch error)
leaves the order as any call-time failure does, and the one after it serves the call. The
kernels here are fakes that raise at once: no threads, no timings."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernelpolicy.engine import resolve_policies
from kernelpolicy.engine.loading import EntryUnloadable
from kernelpolicy.kernels.builds import BuildFailed, Compiling
from kernelpolicy.policy import load_policy_text
from tests.helpers import fixture

FEATURE = "sampler.top_k_top_p"
CALLS: list[str] = []
B_RAISES: list[Exception] = []
"""What candidate b raises when called (set by each test)."""


def A(logits: Any, k: Any, p: Any, generators: Any = None, *, k_max: Any = None) -> Any:
    CALLS.append("a-direct")
    return logits.argmax(-1)


def _a_serving(logits: Any, k: Any, p: Any, generators: Any = None, **_: Any) -> Any:
    CALLS.append("a")
    raise Compiling("fake-a", "float32 top-k", lambda done: None)  # never built here


A.nonblocking = _a_serving  # type: ignore[attr-defined]


def B(logits: Any, k: Any, p: Any, generators: Any = None, *, k_max: Any = None) -> Any:
    CALLS.append("b")
    raise B_RAISES[0]


def policy(dtypes: bool) -> str:
    routed = 'dtypes = ["float32", "bfloat16"]\n' if dtypes else ""
    return f"""
schema = "kernelpolicy.policy/v1"
[features."{FEATURE}"]
description = "a (compiling), then b, then torch, routed by batch"
fallback = "torch"
{routed}[[features."{FEATURE}".candidates]]
impl = "a"
entry = "{__name__}:A"
[[features."{FEATURE}".candidates]]
impl = "b"
entry = "{__name__}:B"
[[features."{FEATURE}".candidates]]
impl = "torch"
[[features."{FEATURE}".by_batch]]
min = 1
prefer = ["a", "b"]
"""


@pytest.mark.parametrize(
    ("error", "dtypes", "note"),
    [
        pytest.param(
            BuildFailed("fake-b: float32 top-k failed to build: RuntimeError: planted"),
            False,
            "b failed at run time (BuildFailed when called: fake-b",
            id="build-failed",
        ),
        pytest.param(
            EntryUnloadable("cannot load b: ImportError: libcudart.so.13 (planted)"),
            False,
            "b cannot be loaded (cannot load b: ImportError",
            id="import-failed",
        ),
        pytest.param(
            RuntimeError("CUDA error: an illegal memory access (planted)"),
            False,
            "b failed at run time (RuntimeError when called: CUDA error",
            id="launch-failed",
        ),
        pytest.param(
            BuildFailed("fake-b: float32 top-k failed to build: RuntimeError: planted"),
            True,
            "b failed at run time for float32 (BuildFailed when called",
            id="build-failed-routed-by-dtype",
        ),
    ],
)
def test_a_failing_next_candidate_leaves_and_torch_serves(
    error: Exception, dtypes: bool, note: str
) -> None:
    """a compiles, b fails on the call: torch serves it, b leaves (the order, or its dtype),
    a keeps its row; the next call goes from a straight to torch, b is not called again."""
    CALLS.clear()
    B_RAISES[:] = [error]
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(policy(dtypes)))
    kernel = resolution.impl(FEATURE)
    logits = torch.randn(4, 300)
    for _ in range(2):
        ids = kernel(logits, torch.full((4,), 1), None)
        assert ids.tolist() == logits.argmax(-1).tolist()  # k=1: torch, greedy
    assert CALLS == ["a", "b", "a"]
    assert note in resolution.runtime_fallbacks[FEATURE]
    decision = resolution.decision(FEATURE)
    assert decision.impl == "a"
    assert decision.order_for(4, "float32") == ("a", "torch")
    assert resolution.compiling_calls == {FEATURE: 2}


def test_the_fallback_failing_too_raises_its_error_and_changes_nothing() -> None:
    """A call torch rejects as well is the call's fault: torch's error, b stays."""
    CALLS.clear()
    B_RAISES[:] = [RuntimeError("planted")]
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(policy(False)))
    kernel = resolution.impl(FEATURE)
    with pytest.raises(AttributeError, match="'str' object has no attribute 'to'"):
        kernel(torch.randn(4, 300), "not a tensor", None)
    assert resolution.decision(FEATURE).order_for(4, "float32") == ("a", "b", "torch")
    assert resolution.compiling_calls == {}
