"""The torch fallbacks: correct, NaN/inf-safe, reproducible, for every dtype."""

from __future__ import annotations

import pytest
import torch

from kernelpolicy.kernels.torch_impl import (
    allreduce_rmsnorm,
    greedy,
    rmsnorm,
    top_k_top_p,
    topk_per_row,
)
from kernelpolicy.verify.patterns import PATTERNS, make_logits
from kernelpolicy.verify.reference import filtered_probs, rmsnorm64

DTYPES = [
    pytest.param(d, id=str(d).removeprefix("torch."))
    for d in (torch.float32, torch.bfloat16, torch.float16)
]
VOCAB = 4096


def ks(value: int | None, batch: int = 8) -> torch.Tensor | None:
    return None if value is None else torch.full((batch,), value)


def ps(value: float | None, batch: int = 8) -> torch.Tensor | None:
    return None if value is None else torch.full((batch,), value)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize(
    ("k", "p"), [(50, None), (None, 0.9), (50, 0.9), (None, None)], ids=["k", "p", "kp", "none"]
)
def test_ids_always_in_range(
    pattern: str, k: int | None, p: float | None, dtype: torch.dtype
) -> None:
    """Every pattern, path and dtype: one id per row, each in [0, vocab)."""
    logits = make_logits(pattern, 8, VOCAB, dtype=dtype)
    ids = top_k_top_p(logits, ks(k), ps(p))
    assert ids.shape == (8,)
    assert ids.dtype == torch.int64
    assert bool(((ids >= 0) & (ids < VOCAB)).all())


@pytest.mark.parametrize(("k", "p"), [(1, None), (3, None), (None, 0.2), (2, 0.99)])
def test_samples_stay_in_the_filtered_support(k: int | None, p: float | None) -> None:
    """Every sampled token has positive probability under the exact filtered softmax."""
    logits = make_logits("clean", 64, 256)
    support = filtered_probs(logits, k, p) > 0
    ids = top_k_top_p(logits, ks(k, 64), ps(p, 64))
    assert bool(support[torch.arange(64), ids].all())


def test_top_k_one_is_argmax() -> None:
    """k = 1 is greedy."""
    logits = make_logits("clean", 16, VOCAB)
    assert torch.equal(top_k_top_p(logits, ks(1, 16), None), logits.argmax(-1))


def test_per_row_k_and_p_with_no_filter_values() -> None:
    """k <= 0 or >= vocab and p >= 1 mean no filtering for that row only."""
    logits = torch.zeros(3, 8)
    logits[:, 7] = 10.0
    k = torch.tensor([0, 8, 1])
    p = torch.tensor([1.0, 1.0, 1.0])
    ids = top_k_top_p(logits, k, p, k_max=8)
    assert ids[2].item() == 7  # k = 1
    assert bool(((ids >= 0) & (ids < 8)).all())


def test_generators_make_seeded_rows_reproducible() -> None:
    """A seeded row draws the same token whatever the other rows and their randomness."""
    logits = make_logits("clean", 4, VOCAB)

    def seeded_draw() -> int:
        gens = {2: torch.Generator().manual_seed(42)}
        torch.manual_seed(int(torch.randint(0, 10**6, (1,))))  # disturb the global stream
        return int(top_k_top_p(logits, ks(50, 4), ps(0.9, 4), gens)[2])

    assert len({seeded_draw() for _ in range(5)}) == 1


def test_top_p_alone_is_not_truncated() -> None:
    """top-p alone keeps the whole nucleus even when it is larger than any fixed count."""
    logits = torch.zeros(1, 2048).expand(20000, 2048).contiguous()  # uniform: nucleus ~ 0.99*V
    ids = top_k_top_p(logits, None, ps(0.99, 20000))
    assert len(ids.unique()) > 1900


@pytest.mark.parametrize("dtype", DTYPES)
def test_greedy(dtype: torch.dtype) -> None:
    """NaN never wins; all-NaN and all -inf rows get id 0; clean rows get their argmax."""
    logits = make_logits("clean", 4, VOCAB, dtype=dtype)
    logits[0] = float("nan")
    logits[1] = float("-inf")
    logits[2, 5] = float("nan")
    ids = greedy(logits)
    assert ids[:2].tolist() == [0, 0]
    expected = torch.where(torch.isnan(logits[2]), float("-inf"), logits[2].float()).argmax()
    assert ids[2] == expected
    assert ids[3] == logits[3].float().argmax()


@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm_and_fused_residual(dtype: torch.dtype) -> None:
    """RMSNorm matches float64 within the dtype's rounding; the residual is x + residual."""
    x, r = torch.randn(4, 512).to(dtype), torch.randn(4, 512).to(dtype)
    w = torch.rand(512).to(dtype)
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 3e-3}[dtype]
    assert torch.allclose(
        rmsnorm(x, w, 1e-6).double(), rmsnorm64(x, w, 1e-6), rtol=tol, atol=tol * 4
    )
    out, new_r = allreduce_rmsnorm(x, r, w, 1e-6)
    fused = x.double() + r.double()
    assert torch.allclose(new_r.double(), fused, rtol=tol, atol=tol * 4)
    assert torch.allclose(out.double(), rmsnorm64(fused, w, 1e-6), rtol=tol, atol=tol * 8)


@pytest.mark.parametrize(
    ("starts", "ends", "k", "expected"),
    [
        pytest.param(None, None, 2, [[1, 2], [0, 1]], id="whole-rows"),
        pytest.param([1, 0], [3, 2], 3, [[0, 1, -1], [0, 1, -1]], id="row-local-and-padded"),
        pytest.param([2, 0], [2, 4], 2, [[-1, -1], [0, 1]], id="empty-range"),
        pytest.param(
            None, None, 6, [[1, 2, 3, 0, -1, -1], [0, 1, 2, 3, -1, -1]], id="k-over-columns"
        ),
    ],
)
def test_topk_per_row(
    starts: list[int] | None, ends: list[int] | None, k: int, expected: list[list[int]]
) -> None:
    """Indices local to each row's valid range, -1 padding, int32 (vLLM's top_k_per_row)."""
    logits = torch.tensor([[1.0, 5.0, 3.0, 2.0], [4.0, 3.0, 2.0, 1.0]])
    out = topk_per_row(
        logits, k,
        None if starts is None else torch.tensor(starts),
        None if ends is None else torch.tensor(ends),
    )  # fmt: skip
    assert out.dtype == torch.int32
    assert out.tolist() == expected


def test_topk_per_row_prefers_valid_minus_inf_over_masked_columns() -> None:
    """A -inf logit inside the range still ranks above the columns outside it."""
    logits = torch.tensor([[9.0, float("-inf"), 7.0, 8.0]])
    out = topk_per_row(logits, 2, torch.tensor([1]), torch.tensor([3]))
    assert out.tolist() == [[1, 0]]
