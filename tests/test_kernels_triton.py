"""The Triton sampler (kernelpolicy.kernels.sampling_triton), run by Triton's interpreter on
CPU tensors when no GPU is here; `kernelpolicy verify --impl triton` runs the full conformance
suite on a real GPU (docs/gpu.md). What it is handed (odd logits, dtypes, k and p of each form,
kernels that fail to build) and its host-side parts: tests/test_kernels_triton_inputs.py.

The draw is an inverse CDF with one uniform per row. Feeding an even grid of uniforms instead of
random ones turns the sampler into a quadrature: each token must be drawn within one of
``rows * probability`` times. That checks the exact filtered distribution with a few hundred
rows, where a chi-square test needs 50,000."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined
pytest.importorskip("triton")

from kernelpolicy.kernels.sampling_triton import Draws, Kernels
from kernelpolicy.verify.distribution import CASES as DIST_CASES
from kernelpolicy.verify.reference import filtered_probs
from tests import triton_helpers as shared
from tests.helpers import TritonSampler
from tests.triton_helpers import DEVICE, full

sample = shared.sample  # the shared fixture, found here by its name


@pytest.fixture
def slow_rows(sample: TritonSampler) -> list[list[int]]:
    """The rows each call hands to the per-row kernel (its ``slow`` flags)."""
    seen: list[list[int]] = []
    kernel = Kernels().row_kernel

    class Spy:
        def __getitem__(self, grid: tuple[int, ...]) -> object:
            def launch(*args: object, **kwargs: object) -> object:
                seen.append([int(v) for v in kwargs["slow"].tolist()])  # type: ignore[attr-defined]
                return kernel[grid](*args, **kwargs)

            return launch

    sample.kernels["row_kernel"] = Spy()
    return seen


@pytest.fixture
def even_uniforms(sample: TritonSampler) -> None:
    """Row i draws with u = (i + 0.5) / rows instead of a random uniform, by the exact paths:
    no proposals for the wide rows (their rejection sampling, which draws several uniforms a
    row, has its own tests in test_kernels_triton_reject.py)."""

    def grid(batch: int, device: torch.device, generators: object) -> torch.Tensor:
        return (torch.arange(batch, dtype=torch.float32, device=device) + 0.5) / batch

    sample.draws = Draws(uniform=grid)
    sample.tuning["proposals"] = 0


def assert_quadrature(ids: torch.Tensor, expected: torch.Tensor) -> None:
    rows = ids.numel()
    counts = torch.bincount(ids.cpu(), minlength=expected.numel()).double()
    worst = float((counts - expected.double() * rows).abs().max())
    assert worst <= 1.0 + 1e-3 * rows, f"a token is off by {worst} draws of {rows}"


@pytest.mark.parametrize(("k", "p"), DIST_CASES, ids=[f"k={k},p={p}" for k, p in DIST_CASES])
def test_exact_distribution_on_the_fast_path(
    even_uniforms: None,
    slow_rows: list[list[int]],
    sample: TritonSampler,
    k: int | None,
    p: float | None,
) -> None:
    """The conformance suite's (k, p) cases: the filtered softmax, exactly. With groups of one
    logit the group maxima bound every nucleus, so no row leaves the fast path."""
    sample.tuning["group"] = 1
    if DEVICE == "cpu":
        sample.tuning["group_block"] = 32  # the row's tile: 32 groups, none of them padding
    row = torch.randn(1, 32, generator=torch.Generator().manual_seed(0)) * 2.0
    rows = 100
    ids = sample(row.expand(rows, -1).contiguous().to(DEVICE), full(k, rows), full(p, rows))
    assert_quadrature(ids, filtered_probs(row, k, p)[0])
    assert not any(any(flags) for flags in slow_rows)


def test_plain_sampling_draws_from_the_group_masses(
    even_uniforms: None, sample: TritonSampler
) -> None:
    """Neither k nor p: a group by its mass, then a token inside it; still the softmax."""
    row = torch.randn(1, 300, generator=torch.Generator().manual_seed(1)) * 3.0
    ids = sample(row.expand(200, -1).contiguous().to(DEVICE), None, None)
    assert_quadrature(ids, torch.softmax(row[0], -1))


@pytest.mark.parametrize(
    ("rounds", "scale", "row_kernel_rows"),
    [
        pytest.param(2, 0.3, [0] * 24, id="wide-kernels"),
        pytest.param(1, 0.001, [1] * 24, id="too-few-rounds-row-kernel"),
    ],
)
def test_wide_nucleus_takes_the_exact_search(
    even_uniforms: None,
    slow_rows: list[list[int]],
    sample: TritonSampler,
    rounds: int,
    scale: float,
    row_kernel_rows: list[int],
) -> None:
    """A nucleus of ~500 tokens is wider than the candidate buffer (here; 1,024 on a GPU):
    the wide kernels narrow its boundary over the whole grid, or, when their rounds leave more
    than the buffer holds, the per-row kernel searches it; both exact."""
    sample.tuning["w_rounds"] = rounds
    row = torch.randn(1, 1000, generator=torch.Generator().manual_seed(2)) * scale
    ids = sample(row.expand(24, -1).contiguous().to(DEVICE), None, full(0.9, 24))
    expected = filtered_probs(row, None, 0.9)[0]
    assert int((expected > 0).sum()) > 500
    assert bool((expected[ids.cpu()] > 0).all())
    assert_quadrature(ids, expected)
    assert slow_rows == [row_kernel_rows]


def test_wide_nucleus_with_ties_at_its_boundary(
    even_uniforms: None, slow_rows: list[list[int]], sample: TritonSampler
) -> None:
    """Logits on a coarse grid (as after rounding): the boundary value is shared by tokens in
    every tile, and the lowest ids of that group stay, counted across the tiles."""
    row = torch.round(torch.randn(1, 600, generator=torch.Generator().manual_seed(3)) * 3) / 10
    rows = 20
    ids = sample(row.expand(rows, -1).contiguous().to(DEVICE), None, full(0.9, rows))
    expected = filtered_probs(row, None, 0.9)[0]
    boundary = float(row[0][expected > 0].min())
    tied = (row[0] == boundary).nonzero().flatten()
    assert 0 < int((expected[tied] > 0).sum()) < tied.numel()  # the cut falls inside the ties
    assert int(tied.max()) >= sample.sampler.tuning.w_block  # ... spread over several tiles
    assert_quadrature(ids, expected)
    assert slow_rows == [[0] * rows]


def test_ties_at_the_top_k_boundary_keep_the_lowest_ids(
    even_uniforms: None, slow_rows: list[list[int]], sample: TritonSampler
) -> None:
    """All logits equal: top-10 is the first 10 tokens, each drawn equally often."""
    ids = sample(torch.zeros(40, 1000, device=DEVICE), full(10, 40), None)
    assert int(ids.max()) < 10
    assert_quadrature(ids, torch.full((10,), 1 / 10))
    assert slow_rows == [[1] * 40]  # 1,000 ties overflow the tiles' slots


def test_two_top_logits_in_one_group_stay_on_the_fast_path(
    slow_rows: list[list[int]], sample: TritonSampler
) -> None:
    """The second maxima of the groups count in the top-p bound: when a row's two largest
    logits share a group, their mass still bounds the nucleus."""
    logits = torch.randn(2, 1000, generator=torch.Generator().manual_seed(5))
    logits[:, 0] = logits[:, 1] = 12.0  # one group, nearly all the mass
    ids = sample(logits.to(DEVICE), None, full(0.9, 2)).cpu()
    assert set(ids.tolist()) <= {0, 1}
    assert slow_rows == [[0, 0]]


def tied_row(vocab: int, high: int, low: int) -> torch.Tensor:
    """``high`` tokens tied at logit 1.0, then ``low`` tied at 0.0, the rest at -30."""
    row = torch.full((1, vocab), -30.0)
    row[0, :high] = 1.0
    row[0, high : high + low] = 0.0
    return row


@pytest.mark.parametrize(
    ("vocab", "high", "low", "rows", "row_block"),
    [
        pytest.param(512, 300, 200, 24, 4096, id="300-tied-in-512"),
        pytest.param(1024, 600, 300, 16, 256, id="600-tied-across-row-blocks"),
    ],
)
def test_ties_across_the_nucleus_boundary_are_drawn_evenly(
    even_uniforms: None,
    sample: TritonSampler,
    vocab: int,
    high: int,
    low: int,
    rows: int,
    row_block: int,
) -> None:
    """A tied group wider than the buffers straddles the top-p cut (p 0.5): vLLM's cut inside
    it (the lowest ids stay) and every kept token drawn in proportion, none of them taking the
    mass outside the group (the last tied token got 11 of 40 draws before). On CPU the buffers
    are small, so a few hundred ties overflow them (a GPU's hold 4,096); in the second case the
    ties and the kept tokens span several of the per-row kernel's blocks."""
    if DEVICE == "cpu":
        sample.tuning["row_block"] = row_block
    row = tied_row(vocab, high, low)
    ids = sample(row.expand(rows, -1).contiguous().to(DEVICE), None, full(0.5, rows)).cpu()
    expected = filtered_probs(row, None, 0.5)[0]
    assert 0 < int((expected > 0).sum()) < high
    assert_quadrature(ids, expected)


def test_wide_kernels_that_fail_to_build_leave_their_rows_to_the_row_kernel(
    even_uniforms: None, slow_rows: list[list[int]], sample: TritonSampler
) -> None:
    """A build failure of the wide kernels (as Triton's layout pass once failed on an H100)
    costs speed, not the call: the per-row kernel takes the wide rows, exactly."""

    class Broken:
        def __getitem__(self, grid: object) -> object:
            def launch(*args: object, **kwargs: object) -> None:
                raise RuntimeError("PassManager::run failed (planted)")

            return launch

    sample.kernels["wide_narrow_kernel"] = Broken()
    row = torch.randn(1, 1000, generator=torch.Generator().manual_seed(2)) * 0.3
    expected = filtered_probs(row, None, 0.9)[0]
    rows = 8  # its search in a wide nucleus: test_wide_nucleus_takes_the_exact_search
    for _ in range(2):
        ids = sample(row.expand(rows, -1).contiguous().to(DEVICE), None, full(0.9, rows))
        assert bool((expected[ids.cpu()] > 0).all())
        assert_quadrature(ids, expected)
    assert slow_rows == [[1] * rows, [1] * rows]
    assert "planted" in sample.sampler.failures.wide_failed[torch.float32]


def test_wide_rows_beside_top_k_rows(
    even_uniforms: None, slow_rows: list[list[int]], sample: TritonSampler
) -> None:
    """k on the host with a 0 for some rows: those rows are top-p alone and may be wide, so the
    wide kernels run for them while the other rows take top-k. When every row has a k, the
    wide kernels are not launched at all."""
    launched: list[int] = []
    kernel = Kernels().wide_tile_kernel

    class Count:
        def __getitem__(self, grid: tuple[int, ...]) -> object:
            launched.append(grid[0])
            return kernel[grid]

    sample.kernels["wide_tile_kernel"] = Count()
    row = torch.randn(1, 1000, generator=torch.Generator().manual_seed(2)) * 0.3
    rows = 16
    logits = row.expand(rows, -1).contiguous().to(DEVICE)
    k = torch.tensor([0, 5] * (rows // 2))
    ids = sample(logits, k, full(0.9, rows)).cpu()
    assert_quadrature(ids[0::2], filtered_probs(row, None, 0.9)[0])
    assert_quadrature(ids[1::2], filtered_probs(row, 5, 0.9)[0])
    assert slow_rows == [[0] * rows]  # the wide rows were finished by the wide kernels
    rounds = sample.sampler.tuning.w_rounds
    assert launched == [rows] * rounds
    sample(logits, torch.full((rows,), 5), full(0.9, rows))
    assert launched == [rows] * rounds  # every row has a k: none launched
