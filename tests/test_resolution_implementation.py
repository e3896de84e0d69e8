"""Resolution.implementation(feature, impl): the callable of what select() answered for a call,
the vLLM plugin's per-call path (found untested by a coverage review)."""

from __future__ import annotations

import pytest
import torch

from kernelpolicy.errors import ResolutionError
from tests.helpers import resolve_on

FEATURE = "sampler.top_k_top_p"
CALL = {"has_generators": False, "has_top_k": True, "has_top_p": True}


@pytest.mark.parametrize(
    ("fixture", "context"),
    [
        pytest.param("cpu", {"logprobs_mode": "raw_logprobs"}, id="cpu"),
        pytest.param("h100-sxm", {"logprobs_mode": "raw_logprobs", "batch": 1024}, id="h100-batch"),
        pytest.param("h100-sxm", {"logprobs_mode": "processed_logprobs"}, id="h100-processed"),
    ],
)
def test_what_select_answers_loads_once(fixture: str, context: dict[str, object]) -> None:
    """select()'s answer loads as a callable, the same object on the next call."""
    resolution = resolve_on(fixture)
    name = resolution.select(FEATURE, **CALL, **context)
    function = resolution.implementation(FEATURE, name)
    assert callable(function)
    assert resolution.implementation(FEATURE, name) is function


def test_the_torch_answer_samples_inside_the_filter() -> None:
    """On the CPU the answer is torch, and it samples within top-k."""
    resolution = resolve_on("cpu")
    name = resolution.select(FEATURE, **CALL, logprobs_mode="raw_logprobs")
    torch.manual_seed(0)
    logits = torch.randn(4, 50)
    k = torch.tensor([3, 3, 3, 3])
    ids = resolution.implementation(FEATURE, name)(logits, k, None, None)
    top = logits.topk(3, dim=-1).indices
    assert all(int(i) in top[row].tolist() for row, i in enumerate(ids.view(-1)))


@pytest.mark.parametrize(
    ("fixture", "impl"),
    [
        pytest.param("cpu", "nonesuch", id="no-such-implementation"),
        pytest.param("cpu", "flashinfer", id="a-candidate-rejected-here"),
        pytest.param("mi300x", "triton", id="another-vendors-kernel"),
    ],
)
def test_a_name_that_is_no_candidate_here_is_refused(fixture: str, impl: str) -> None:
    with pytest.raises(ResolutionError, match=f"{FEATURE}: .*{impl}.* is not a candidate here"):
        resolve_on(fixture).implementation(FEATURE, impl)
