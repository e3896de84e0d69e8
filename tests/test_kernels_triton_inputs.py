"""The Triton sampler (kernelpolicy.kernels.sampling_triton) on what it is handed, run by
Triton's interpreter on CPU tensors when no GPU is here: NaN, infinite and flat rows, rows with
and without k in one batch, seeded rows, half precision, k above its limit and strided logits,
kernels that fail to build; and its host-side parts, the bound of k and the group pass. Its
exact distribution: tests/test_kernels_triton.py."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined
pytest.importorskip("triton")

from kernelpolicy.kernels.sampling_triton import Kernels, Sampler, Tuning, variants
from kernelpolicy.verify.patterns import PATTERNS, damaged_rows, make_logits
from kernelpolicy.verify.reference import filtered_probs
from tests import triton_helpers as shared
from tests.helpers import SMALL_TRITON_TUNING, TritonSampler
from tests.triton_helpers import DEVICE, full

sample = shared.sample  # the shared fixture, found here by its name


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize(
    ("k", "p"), [(20, None), (None, 0.9), (20, 0.9), (None, None)], ids=["k", "p", "kp", "none"]
)
def test_pathological_logits(
    sample: TritonSampler, pattern: str, k: int | None, p: float | None
) -> None:
    """NaN, +/-inf and flat rows: ids in range; clean rows inside their own support."""
    logits = make_logits(pattern, 4, 1024, device=DEVICE)
    ids = sample(logits, full(k, 4), full(p, 4)).cpu()
    assert ids.shape == (4,)
    assert ids.dtype == torch.int64
    assert bool(((ids >= 0) & (ids < 1024)).all())
    support = filtered_probs(logits.cpu(), k, p) > 0
    for row in set(range(4)) - damaged_rows(pattern, 4):
        assert bool(support[row, ids[row]])


def test_special_rows(sample: TritonSampler) -> None:
    """+inf logits share the mass; nothing finite gives token 0."""
    logits = torch.randn(3, 1000)
    logits[0, [7, 300, 999]] = float("inf")
    logits[1] = float("nan")
    logits[2] = float("-inf")
    for k, p in [(None, None), (None, 0.9), (10, None)]:
        ids = sample(logits.to(DEVICE), full(k, 3), full(p, 3)).tolist()
        assert ids[0] in (7, 300, 999)
        assert ids[1:] == [0, 0]


def test_rows_with_and_without_k_in_one_batch(sample: TritonSampler) -> None:
    """k <= 0 or >= vocab makes a row top-p (or plain) while the others are top-k."""
    logits = make_logits("clean", 4, 1000, device=DEVICE)
    k = torch.tensor([0, 5, 1000, 1])
    p = torch.tensor([0.5, 0.9, 1.0, 0.9])
    ids = sample(logits, k, p).cpu()
    for row, (kk, pp) in enumerate([(None, 0.5), (5, 0.9), (None, None), (1, 0.9)]):
        assert bool(filtered_probs(logits[row : row + 1].cpu(), kk, pp)[0, ids[row]] > 0)
    assert int(ids[3]) == int(logits[3].argmax())


def test_seeded_rows_are_reproducible(sample: TritonSampler) -> None:
    """A seeded row draws the same token whatever the other rows hold."""

    def seeded_draw(other: int) -> int:
        logits = make_logits("clean", 3, 1000, seed=other, device=DEVICE)
        logits[1] = make_logits("clean", 1, 1000, seed=7, device=DEVICE)[0]
        generators = {1: torch.Generator(device=DEVICE).manual_seed(42)}
        return int(sample(logits, full(20, 3), full(0.9, 3), generators)[1])

    assert len({seeded_draw(other) for other in range(3)}) == 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_half_precision_logits_are_read_as_they_are(
    sample: TritonSampler, dtype: torch.dtype
) -> None:
    logits = make_logits("clean", 4, 1000, device=DEVICE)
    ids = sample(logits.to(dtype), full(20, 4), full(0.9, 4)).cpu()
    support = filtered_probs(logits.to(dtype).float().cpu(), 20, 0.9) > 0
    assert bool(support[torch.arange(4), ids].all())


def test_large_k_and_strided_logits(sample: TritonSampler) -> None:
    """k above MAX_K goes to the torch implementation; a strided view is copied first."""
    logits = make_logits("clean", 2, 1000, device=DEVICE)
    too_big = sample.sampler.tuning.max_k + 1
    big = sample(logits, full(too_big, 2), None).cpu()
    assert bool((filtered_probs(logits.cpu(), too_big, None)[[0, 1], big] > 0).all())
    strided = torch.cat([logits, logits], dim=1)[:, ::2]
    ids = sample(strided, full(5, 2), None).cpu()
    assert bool((filtered_probs(strided.cpu(), 5, None)[[0, 1], ids] > 0).all())
    with pytest.raises(ValueError, match=r"\[batch, vocab\]"):
        sample(logits[0], None, None)


def test_a_dtype_whose_kernels_fail_to_build_is_read_as_float32(sample: TritonSampler) -> None:
    """A compile failure for bfloat16 (as Triton's layout pass once failed on an H100): the call
    converts the logits to float32 instead of raising, and later calls do so at once."""
    dtypes: list[torch.dtype] = []

    class FailsForHalf(Sampler):
        def pipeline(self, x: torch.Tensor, *args: Any) -> torch.Tensor:
            dtypes.append(x.dtype)
            if x.dtype != torch.float32:
                raise RuntimeError("PassManager::run failed (planted)")
            return super().pipeline(x, *args)

    tuning = Tuning().replace(**sample.tuning)
    sample._sampler = FailsForHalf(tuning)
    logits = make_logits("clean", 4, 1000, device=DEVICE).bfloat16()
    for _ in range(2):
        ids = sample(logits, full(20, 4), None).cpu()
        assert bool(
            (filtered_probs(logits.float().cpu(), 20, None)[torch.arange(4), ids] > 0).all()
        )
    assert dtypes == [torch.bfloat16, torch.float32, torch.float32]
    assert "planted" in sample.sampler.failures.upcast[torch.bfloat16]


@pytest.mark.parametrize(
    ("k", "vocab", "expected"),
    [
        pytest.param([5, 50, 7], 1000, (50, True), id="every-row"),
        pytest.param([5, 1000, 7], 1000, (7, False), id="vocab-means-none"),
        pytest.param([0, 3, -1], 1000, (3, False), id="zero-and-negative-mean-none"),
        pytest.param([1000, 2000], 1000, (0, False), id="no-row"),
        pytest.param([999], 1000, (999, True), id="largest-valid"),
        pytest.param([], 1000, (0, False), id="empty"),
    ],
)
def test_k_bound_reads_k_on_the_host_in_one_reduction(
    k: list[int], vocab: int, expected: tuple[int, bool]
) -> None:
    """The host reads only the bound and whether every row has k; the kernels read a k outside
    (0, vocab) as no top-k themselves (see test_rows_with_and_without_k_in_one_batch)."""
    for dtype in (torch.int64, torch.int32):
        assert variants.k_bound_of(torch.tensor(k, dtype=dtype), vocab, None) == expected


def _group_pass(x: torch.Tensor, one_reduce: bool, gs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The group kernel's maxima and second maxima ([batch, 2, groups]) and sums, in one form."""
    batch, vocab = x.shape
    block = int(SMALL_TRITON_TUNING["group_block"]) if DEVICE == "cpu" else Tuning().group_block
    tiles = -(-vocab // block)
    groups = tiles * (block // gs)
    gmax = torch.full((batch, 2 * groups), -1.0, device=x.device)
    gsum = torch.full((batch, 2 * groups), -1.0, device=x.device)  # rows 2 * groups apart
    counts = torch.ones(batch, tiles, dtype=torch.int32, device=x.device)
    Kernels().group_kernel[(batch, tiles)](
        logits=x, stride=x.stride(0), V=vocab, gmax=gmax, gsum=gsum, g_stride=2 * groups,
        G=groups, counts=counts, n_tiles=tiles, BLOCK=block, GS=gs, ONE_REDUCE=one_reduce,
    )  # fmt: skip
    assert int(counts.sum()) == 0
    return gmax.view(batch, 2, groups), gsum[:, :groups]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_the_group_pass_reduces_once_with_the_same_results(dtype: torch.dtype) -> None:
    """One reduction of (largest, second, largest finite) triples gives exactly the four
    reductions' maxima, second maxima and sums, on groups with a tied maximum, +inf (one or
    two), -inf, NaN, nothing finite, and a tail past the vocabulary; and the maxima and second
    maxima are the two largest of each group (a tied maximum its own second)."""
    gs, vocab = 4, 300  # 300 is not a multiple of the tile: the last groups are padding
    x = (torch.randn(6, vocab, generator=torch.Generator().manual_seed(3)) * 4).round()
    inf, nan = float("inf"), float("nan")
    x[0, :8] = torch.tensor([2.0, 2.0, 1.0, 0.0, inf, 1.0, inf, 3.0])
    x[1, :8] = torch.tensor([-inf, -inf, -inf, -inf, nan, nan, nan, nan])
    x[2, :8] = torch.tensor([nan, 5.0, -inf, 5.0, -inf, inf, -inf, -inf])
    x = x.to(dtype).to(DEVICE)
    (gmax, gsum), (old_max, old_sum) = _group_pass(x, True, gs), _group_pass(x, False, gs)
    assert torch.equal(gmax, old_max)
    assert torch.equal(gsum, old_sum)
    clean = torch.nan_to_num(x.float(), nan=-inf, posinf=inf, neginf=-inf).cpu()
    padded = torch.nn.functional.pad(clean, (0, gmax.shape[-1] * gs - vocab), value=-inf)
    top2 = padded.view(6, -1, gs).topk(2, dim=-1).values
    assert torch.equal(gmax.cpu(), top2.transpose(1, 2))
