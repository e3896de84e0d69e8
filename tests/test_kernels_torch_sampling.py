"""The torch sampler's semantics, one table per rule: the id-0 contract for empty rows on every
path, top-p = 1 as no top-p and vLLM's cut (ascending cumulative sum <= 1 - p dropped), ties
broken by lowest id with exactly k kept, and the exact nucleus from every top-p path (the CPU's
histogram, and the sorted blocks the GPU runs, here on the CPU).

With an even grid of uniforms instead of random ones, the inverse-CDF draw is a quadrature:
each token is drawn within one of ``rows * probability`` times, and never outside the kept set.
"""

from __future__ import annotations

import pytest
import torch

from kernelpolicy.kernels import torch_sampling
from kernelpolicy.kernels.torch_impl import greedy, top_k_top_p, top_p_path
from kernelpolicy.kernels.torch_sampling import binned, blocks, nucleus
from kernelpolicy.kernels.torch_sampling.top_k import SORT_ROWS, top_p_by_sort
from kernelpolicy.verify.reference import filtered_probs

DTYPES = [
    pytest.param(d, id=str(d).removeprefix("torch."))
    for d in (torch.float32, torch.bfloat16, torch.float16)
]
PATHS = [
    pytest.param(50, None, id="top_k"),
    pytest.param(None, 0.9, id="top_p"),
    pytest.param(50, 0.9, id="top_k_top_p"),
    pytest.param(None, None, id="plain"),
]


def full(value: float | None, batch: int) -> torch.Tensor | None:
    return None if value is None else torch.full((batch,), value)


@pytest.fixture
def even_uniforms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Row i draws with u = (i + 0.5) / rows."""

    def grid(batch: int, device: torch.device, generators: object) -> torch.Tensor:
        rows = torch.arange(batch, dtype=torch.float64, device=device)
        return ((rows + 0.5) / batch).unsqueeze(-1)

    monkeypatch.setattr(torch_sampling, "uniforms", grid)


def assert_quadrature(ids: torch.Tensor, expected: torch.Tensor, pieces: int = 1) -> None:
    """``pieces``: the intervals of uniforms that may map to one token (1 for an inverse CDF;
    more where rejected proposals are redrawn from the rest of their uniform)."""
    rows = ids.numel()
    counts = torch.bincount(ids, minlength=expected.numel()).double()
    assert not bool(counts[expected == 0].any()), "a token outside the kept set was drawn"
    worst = float((counts - expected.double() * rows).abs().max())
    assert worst <= pieces + 1e-3 * rows, f"a token is off by {worst} draws of {rows}"


REDRAWN = 6  # the CPU histogram's redrawn proposals: a few more intervals per token


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fill", [float("nan"), float("-inf")], ids=["all-nan", "all-neg-inf"])
@pytest.mark.parametrize(("k", "p"), PATHS)
def test_a_row_with_nothing_finite_gives_token_zero(
    k: int | None, p: float | None, fill: float, dtype: torch.dtype
) -> None:
    """What torch.argmax and FlashInfer give such a row, on every path and dtype."""
    logits = torch.randn(4, 1000).to(dtype)
    logits[1:3] = fill
    ids = top_k_top_p(logits, full(k, 4), full(p, 4))
    assert ids[1:3].tolist() == [0, 0]
    assert greedy(logits)[1:3].tolist() == [0, 0]


@pytest.mark.parametrize(
    ("logits", "p", "kept"),
    [
        pytest.param([[0.0] + [-20.0] * 8], 1.0, 9, id="p-one-keeps-the-tail"),
        pytest.param([[0.0] + [-20.0] * 8], 0.999999, 1, id="p-below-one-cuts-the-tail"),
        pytest.param([[0.0, 0.0, 0.0, 0.0]], 0.5, 2, id="uniform-half"),
        pytest.param([[0.0, 0.0, 0.0, 0.0]], 0.51, 3, id="uniform-just-over-half"),
        pytest.param([[2.0, 1.0, 0.0, -1.0]], 0.0, 1, id="p-zero-keeps-the-top"),
        pytest.param([[1.0] * 3 + [0.0] * 3], 0.5, 3, id="tied-groups"),
    ],
)
def test_top_p_kept_count_follows_vllms_rule(
    logits: list[list[float]], p: float, kept: int
) -> None:
    """A token is dropped when the ascending cumulative probability up to it is <= 1 - p; p >= 1
    drops nothing. The sorted-blocks search and the sorted-candidates mask agree with the
    reference."""
    x = torch.tensor(logits)
    w, _ = torch_sampling.weights(x)
    searched = int(blocks.kept_mask(x, torch.tensor([p]), block=4).sum())
    on_sorted = ~torch_sampling.top_p_mask_sorted(w.sort(descending=True).values, torch.tensor(p))
    reference = int((filtered_probs(x, None, p) > 0).sum()) if p < 1 else x.shape[-1]
    assert (searched, int(on_sorted.sum()), reference) == (kept, kept, kept)


def test_top_p_one_keeps_a_wide_vocabulary_whole() -> None:
    """randn * 8 over 128,256 tokens: the float32 running sum reaches 1.0 long before the end,
    which must not cut anything at p = 1."""
    x = torch.randn(2, 128256, generator=torch.Generator().manual_seed(0)) * 8
    assert bool(blocks.kept_mask(x, torch.ones(2)).all())


@pytest.mark.parametrize(
    ("logits", "k", "expected"),
    [
        pytest.param([[1.0, 1.0, 0.5, 0.0]], 1, [0], id="k1-tie-is-greedy"),
        pytest.param([[0.0, 3.0, 3.0, 3.0, 1.0]], 2, [1, 2], id="exactly-k-of-a-tie"),
        pytest.param([[5.0] + [2.0] * 300 + [1.0]], 3, [0, 1, 2], id="tie-past-the-candidates"),
        pytest.param([[0.0] * 64], 4, [0, 1, 2, 3], id="flat-row"),
    ],
)
def test_top_k_keeps_exactly_k_with_the_lowest_ids(
    even_uniforms: None, logits: list[list[float]], k: int, expected: list[int]
) -> None:
    """Ties at the k-th value keep the lowest ids, and exactly k tokens stay."""
    x = torch.tensor(logits).expand(64, -1).contiguous()
    ids = top_k_top_p(x, full(k, 64), None)
    assert sorted(set(ids.tolist())) == expected
    assert torch.equal(top_k_top_p(x, full(1, 64), None), greedy(x))


def tie_rows() -> torch.Tensor:
    """5,000 tokens tied at 1.0 and 5,000 at 0.0 in a vocabulary of 16,384 (the rest -30)."""
    x = torch.full((1, 16384), -30.0)
    x[0, :5000] = 1.0
    x[0, 5000:10000] = 0.0
    return x


NUCLEUS_CASES = [
    pytest.param(lambda: torch.randn(1, 4096) * 5, None, 0.9, id="narrow"),
    pytest.param(lambda: torch.randn(1, 4096), None, 0.9, id="wide"),
    pytest.param(lambda: torch.randn(1, 4096).bfloat16().float() * 3, None, 0.7, id="bf16-ties"),
    pytest.param(tie_rows, None, 0.5, id="tied-group-across-the-cut"),
    pytest.param(tie_rows, 6000, 0.5, id="tied-group-across-k-and-p"),
    pytest.param(lambda: torch.randn(1, 4096) * 2, 300, 0.95, id="k-of-300"),
    pytest.param(lambda: torch.randn(1, 6000), None, 0.9, id="wide-in-chunks"),
    pytest.param(lambda: torch.randn(1, 6000) * 3, None, 1e-6, id="p-near-zero-in-chunks"),
    pytest.param(lambda: torch.randn(1, 6000) * 3, None, 0.999, id="p-near-one-in-chunks"),
]


@pytest.mark.parametrize(("make", "k", "p"), NUCLEUS_CASES)
def test_the_draw_is_the_exact_filtered_softmax(
    even_uniforms: None, make: object, k: int | None, p: float
) -> None:
    """Every top-p path (the CPU's histogram, and the sorted blocks and the whole-row sort the
    GPU takes) draws each kept token in proportion to its probability and nothing else."""
    torch.manual_seed(3)
    row = make()  # type: ignore[operator]
    expected = filtered_probs(row, k, p)[0]
    rows = 400
    x = row.expand(rows, -1).contiguous()
    pieces = REDRAWN if k is None else 1  # top-p alone on the CPU: the histogram
    assert_quadrature(top_k_top_p(x, full(k, rows), full(p, rows)), expected, pieces)
    if k is None:
        u = torch_sampling.uniforms(rows, x.device, None)
        assert_quadrature(blocks.top_p(x, full(p, rows), u, block=512), expected)  # type: ignore[arg-type]
        assert_quadrature(top_p_by_sort(x, full(p, rows), u), expected)  # type: ignore[arg-type]
        drawn = binned.binned(binned.rows(x), full(p, rows), u)  # type: ignore[arg-type]
        assert_quadrature(drawn, expected, REDRAWN)


def test_mixed_rows_of_k_p_and_none_in_one_batch(even_uniforms: None) -> None:
    """Per-row k (0: none) and p (1.0: none), as vLLM passes a mixed batch."""
    row = torch.randn(1, 512, generator=torch.Generator().manual_seed(5)) * 2
    settings = [(5, 1.0), (0, 0.8), (0, 1.0), (40, 0.6)]
    rows = 200
    x = row.expand(rows * len(settings), -1).contiguous()
    k = torch.tensor([s[0] for s in settings]).repeat_interleave(rows)
    p = torch.tensor([s[1] for s in settings]).repeat_interleave(rows)
    ids = top_k_top_p(x, k, p)
    for i, (kk, pp) in enumerate(settings):
        part = ids[i * rows : (i + 1) * rows]
        # the grid restarts for every block of rows only in expectation: check the support
        expected = filtered_probs(row, kk or None, pp)[0]
        assert bool((expected[part] > 0).all())


def _rows(scale: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    x = torch.randn(6, 3000, generator=torch.Generator().manual_seed(7)) * scale
    return x.to(dtype)


@pytest.mark.parametrize(
    ("logits", "block", "probes"),
    [
        pytest.param(_rows(5.0), 4096, 15, id="narrow-one-padded-block"),
        pytest.param(_rows(1.0), 256, 255, id="wide-padded-blocks"),
        pytest.param(_rows(3.0, torch.bfloat16), 1000, 15, id="bf16-ties-exact-blocks"),
        pytest.param(_rows(2.0, torch.float16), 128, 3, id="fp16-two-bit-rounds"),
        pytest.param(torch.round(_rows(2.0)), 64, 63, id="integer-logits-many-ties"),
        pytest.param(torch.zeros(6, 2048), 512, 255, id="one-value"),  # sums exact in binary
    ],
)
def test_sorted_blocks_keep_exactly_the_sorts_nucleus(
    logits: torch.Tensor, block: int, probes: int
) -> None:
    """The GPU's top-p path (run here on the CPU) keeps the same tokens as a full stable sort,
    for every block size and search width, with p < 1, p = 1 and p near 0 in one batch."""
    p = torch.tensor([0.9, 0.5, 0.999, 1.0, 1e-6, 0.3])
    got = blocks.kept_mask(logits, p, block=block, probes=probes)
    x = logits.float()
    for row in range(x.shape[0]):
        expected = filtered_probs(x[row : row + 1], None, float(p[row]))[0] > 0
        assert torch.equal(got[row], expected), f"row {row} (p {float(p[row])})"


@pytest.mark.parametrize(
    ("vocab", "block", "expected"),
    [
        pytest.param(128256, 4096, 4008, id="llama3-vocab-32-unpadded-blocks"),
        pytest.param(151936, 4096, 2374, id="qwen-vocab-64-unpadded-blocks"),
        pytest.param(3 * 4096, 4096, 4096, id="a-multiple-of-the-block"),
        pytest.param(4099, 4096, 4096, id="prime-vocab-padded"),
        pytest.param(3000, 4096, 3000, id="short-row-one-block"),
        pytest.param(3000, 1024, 1000, id="divisor-in-the-upper-half"),
    ],
)
def test_block_size_divides_the_vocabulary_where_it_can(
    vocab: int, block: int, expected: int
) -> None:
    """Blocks that divide the row need no padding copy; none in [block / 2, block]: pad."""
    assert blocks.block_size(vocab, block) == expected


@pytest.mark.parametrize(
    ("logits", "block"),
    [
        pytest.param(_rows(1.0), 1024, id="wide-unpadded-blocks-of-1000"),
        pytest.param(torch.round(_rows(2.0)), 1024, id="integer-ties-unpadded-blocks"),
        pytest.param(
            torch.randn(6, 4099, generator=torch.Generator().manual_seed(13)) * 3,
            4096,
            id="prime-vocab-padded-block",
        ),
    ],
)
def test_unpadded_blocks_keep_exactly_the_sorts_nucleus(logits: torch.Tensor, block: int) -> None:
    """The block length chosen to divide the vocabulary keeps the sort's nucleus."""
    p = torch.tensor([0.9, 0.5, 0.999, 1.0, 1e-6, 0.3])
    got = blocks.kept_mask(logits, p, block=block)
    for row in range(logits.shape[0]):
        expected = filtered_probs(logits[row : row + 1], None, float(p[row]))[0] > 0
        assert torch.equal(got[row], expected), f"row {row} (p {float(p[row])})"


GPU_TOP_P = {
    "sorted blocks": lambda x, p, u: blocks.top_p(x, p, u, block=256),
    "whole-row sort": top_p_by_sort,
}


@pytest.mark.parametrize("path", GPU_TOP_P)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_top_p_infinities_and_empty_rows(dtype: torch.dtype, path: str) -> None:
    """+inf tokens share all the mass (ties by lowest id under top-p), NaN is never drawn, and
    a row with nothing finite gives 0, on the GPU's paths too."""
    x = torch.randn(4, 700).to(dtype)
    x[0, [5, 9, 600]] = float("inf")
    x[1] = float("nan")
    x[2] = float("-inf")
    x[3, 1::2] = float("nan")
    u = torch.rand(4, 1, dtype=torch.float64)
    ids = GPU_TOP_P[path](x, torch.tensor([0.5, 0.9, 0.9, 0.9]), u)
    assert ids[0].item() in (5, 9)
    assert ids[1:3].tolist() == [0, 0]
    assert ids[3].item() % 2 == 0


@pytest.mark.parametrize(
    ("device", "rows", "path"),
    [
        pytest.param("cpu", 1, "binned", id="cpu-one-row"),
        pytest.param("cpu", 4096, "binned", id="cpu-many-rows"),
        pytest.param("cuda", 1, "sort", id="gpu-one-row"),
        pytest.param("cuda", SORT_ROWS, "sort", id="gpu-at-the-bound"),
        pytest.param("cuda", SORT_ROWS + 1, "blocks", id="gpu-past-the-bound"),
        pytest.param("cuda", 1024, "blocks", id="gpu-many-rows"),
        pytest.param("xpu", 8, "sort", id="another-accelerator"),
    ],
)
def test_top_p_path_by_device_and_rows(device: str, rows: int, path: str) -> None:
    """Top-p alone sorts whole rows only on a GPU and up to SORT_ROWS rows (launch-bound)."""
    assert top_p_path(device, rows) == path


WIDE = binned.SHORT + 904  # past the rows sorted whole: the histogram's path


def _wide(batch: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.randn(batch, WIDE, generator=torch.Generator().manual_seed(11)) * 2).to(dtype)


def _with(batch: int, row: int, columns: slice, value: float) -> torch.Tensor:
    x = _wide(batch)
    x[row, columns] = value
    return x


def _inf_and_empty_rows() -> torch.Tensor:
    x = _with(binned.CHUNK, 2, slice(7, 9), float("inf"))
    x[3] = float("-inf")
    return x


CHUNK = binned.CHUNK
CHUNK_CASES = [
    pytest.param(_wide(2 * CHUNK + 3), id="batch-not-a-multiple-of-the-chunk"),
    pytest.param(_wide(1), id="one-row"),
    pytest.param(_wide(CHUNK - 1), id="one-short-chunk"),
    pytest.param(_with(CHUNK + 2, 1, slice(0, None, 3), float("nan")), id="nan-row-in-a-chunk"),
    pytest.param(_with(CHUNK + 2, CHUNK, slice(5, 6), float("nan")), id="one-nan-in-chunk-two"),
    pytest.param(_inf_and_empty_rows(), id="inf-and-empty-rows-in-a-chunk"),
    pytest.param(_with(CHUNK + 1, 0, slice(None), float("nan")), id="all-nan-row"),
    pytest.param(_wide(CHUNK + 1, torch.bfloat16), id="bfloat16"),
    pytest.param(torch.cat([_wide(5), _wide(5)], dim=-1)[:, ::2], id="strided-logits"),
]


@pytest.mark.parametrize("logits", CHUNK_CASES)
def test_chunks_draw_every_row_as_it_would_alone(logits: torch.Tensor) -> None:
    """The CPU top-p runs rows a chunk at a time (NaN repaired per chunk, other rows set
    aside): each row draws the token it draws alone with the same uniform, p < 1 and p = 1
    rows mixed, and never a token outside its nucleus."""
    batch = logits.shape[0]
    p = torch.tensor([0.9, 1.0, 0.5, 0.99])[torch.arange(batch) % 4]
    u = torch.rand(batch, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ids = binned.top_p(logits, p, u)
    alone = [binned.top_p(logits[i : i + 1], p[i : i + 1], u[i : i + 1]) for i in range(batch)]
    assert torch.equal(ids, torch.cat(alone))
    x = torch_sampling.prepare(logits)
    for row in range(batch):
        if bool(torch.isfinite(x[row]).any()):
            support = filtered_probs(x[row : row + 1], None, float(p[row]))[0] > 0
            assert bool(support[ids[row]]), f"row {row} drew {int(ids[row])} outside its nucleus"
        else:
            assert int(ids[row]) == 0


def _bins_of(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int32)


@pytest.mark.parametrize(
    ("flat", "a", "b"),
    [
        pytest.param(_bins_of([[1, 2, 3, 2, 1]] * 3), [1, 2, 3], [2, 2, 1], id="partial-last-word"),
        pytest.param(_bins_of([[4] * 16, [5] * 16]), [4, 5], [4, 5], id="every-entry-one-bin"),
        pytest.param(_bins_of([[0, 1] * 8]), [7], [9], id="no-hit"),
        pytest.param(_bins_of([[3, 1, 3, 1, 3, 1, 3, 1, 3]]), [3], [1], id="every-entry-a-hit"),
    ],
)
def test_two_bins_finds_exactly_the_positions_of_either_bin(
    flat: torch.Tensor, a: list[int], b: list[int]
) -> None:
    """The extraction behind the CPU top-p reads bytes as 64-bit words: any row length, no
    hit, every entry a hit, and a = b (then nothing is the proposed bin's alone)."""
    ta = torch.tensor(a, dtype=torch.int32).unsqueeze(-1)
    tb = torch.tensor(b, dtype=torch.int32).unsqueeze(-1)
    sel, group = binned._two_bins(flat, ta, tb)
    in_a, in_b = flat == ta, flat == tb
    assert sel.tolist() == (in_a | in_b).view(-1).nonzero().squeeze(-1).tolist()
    assert group.tolist() == (in_b & ~in_a).view(-1)[sel].long().tolist()


@pytest.mark.parametrize(
    ("values", "ids", "order"),
    [
        pytest.param([-1.0, 2.0, -3.0, 0.5], [4, 9, 11, 30], [9, 30, 4, 11], id="signs"),
        pytest.param([1.5, 1.5, 2.0, 1.5], [3, 5, 8, 2], [8, 2, 3, 5], id="ties-by-lower-id"),
        pytest.param([-0.0, 0.0, -0.0], [7, 6, 9], [6, 7, 9], id="minus-zero-ties-zero"),
        pytest.param([float("-inf"), -1e30, 3.0, 0.0], [1, 2, 3, -1], [3, 2, 1, -1], id="padding"),
    ],
)
def test_boundary_bin_sorts_by_value_then_lower_id(
    values: list[float], ids: list[int], order: list[int]
) -> None:
    """The CPU top-p sorts its boundary bin by int64 keys (the value's order, then the id):
    descending values, ties (-0.0 = 0.0 included) by lower id, the padding (id -1) last."""
    v, i = torch.tensor([values]), torch.tensor([ids])
    total = torch.ones(1, 1, dtype=torch.float64)
    e = nucleus.edge((i, v, torch.zeros(1, len(ids))), total * 0, total, total * 0.5)
    assert e.ids[0].tolist() == order
