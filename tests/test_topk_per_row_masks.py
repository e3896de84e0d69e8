"""topk_per_row's exact order for any value (issue 24, finding 9): masks, not sentinels.

The order: descending value, -inf and NaN (ranked as -inf) below every finite value, the lower
column first among equal values, only the columns in ``[row_starts, row_ends)``. A finite
``finfo.min`` used to be replaced by the same stand-in as -inf and NaN and so tied with them.
"""

from __future__ import annotations

import pytest
import torch

from kernelpolicy.kernels.torch_impl import topk_per_row
from kernelpolicy.verify import accuracy
from kernelpolicy.verify.reference import topk_per_row_reference

INF, NAN = float("inf"), float("nan")
LOWEST = torch.finfo(torch.float32).min


def _row(values: list[float], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor([values], dtype=dtype)


def _lowest_at_5() -> torch.Tensor:
    row = torch.full((1, 16), -INF)
    row[0, 5] = LOWEST
    return row


@pytest.mark.parametrize(
    ("logits", "k", "expected"),
    [
        pytest.param(_lowest_at_5(), 1, [5], id="issue-min-among-minus-inf"),
        pytest.param(_row([-INF, LOWEST, -INF, NAN]), 2, [1, 0], id="issue-min-among-inf-and-nan"),
        pytest.param(_row([NAN, -INF, NAN, -INF]), 4, [0, 1, 2, 3], id="nan-ties-minus-inf"),
        pytest.param(_row([LOWEST, NAN, LOWEST, -INF]), 3, [0, 2, 1], id="min-tied-with-min"),
        pytest.param(_row([1.0, 3.0, 3.0, 1.0, 3.0]), 4, [1, 2, 4, 0], id="ties-lower-first"),
        pytest.param(_row([0.0, -0.0, 0.0, -1.0]), 3, [0, 1, 2], id="zero-equals-minus-zero"),
        pytest.param(_row([INF, 1.0, INF, NAN]), 3, [0, 2, 1], id="plus-inf-ties"),
        pytest.param(_row([-1.0, LOWEST, -3.0e38]), 3, [0, 2, 1], id="negatives-in-order"),
        pytest.param(
            _row([-INF, 65504.0, -65504.0, NAN], torch.float16), 3, [1, 2, 0], id="float16-min"
        ),
        pytest.param(
            _row([NAN, -INF, torch.finfo(torch.bfloat16).min], torch.bfloat16),
            2,
            [2, 0],
            id="bfloat16-min",
        ),
        pytest.param(
            _row([1.0, 1.0 + 1e-12, -INF, LOWEST * 2], torch.float64),
            4,
            [1, 0, 3, 2],
            id="float64-finer-than-float32",
        ),
    ],
)
def test_exact_order_of_whole_rows(logits: torch.Tensor, k: int, expected: list[int]) -> None:
    """Each named row gives exactly its documented order."""
    assert topk_per_row(logits, k).tolist() == [expected]


@pytest.mark.parametrize(
    ("values", "start", "end", "k", "expected"),
    [
        pytest.param([9.0, LOWEST, -INF, 9.0], 1, 3, 2, [0, 1], id="finite-outside-never-taken"),
        pytest.param([9.0, NAN, NAN, 9.0], 1, 3, 3, [0, 1, -1], id="nan-in-range-outside-finite"),
        pytest.param([LOWEST, -INF, LOWEST], 1, 3, 2, [1, 0], id="min-in-range-over-minus-inf"),
        pytest.param([LOWEST] * 4, 2, 2, 2, [-1, -1], id="empty-range"),
    ],
)
def test_ranges_are_masks(
    values: list[float], start: int, end: int, k: int, expected: list[int]
) -> None:
    """Columns outside the range are never ranked, whatever their value; -1 pads."""
    out = topk_per_row(_row(values), k, torch.tensor([start]), torch.tensor([end]))
    assert out.tolist() == [expected]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_agrees_with_the_reference_on_tie_heavy_rows(dtype: torch.dtype) -> None:
    """Rows drawn from a few values (finfo.min, -inf, NaN, +inf, +-0.0, small integers) so that
    every rank is tied, with random ranges: the same lists as the plain-Python reference."""
    g = torch.Generator().manual_seed(24)
    lowest = torch.finfo(dtype).min
    pool = torch.tensor([lowest, -INF, NAN, INF, 0.0, -0.0, 1.0, 2.0, -2.0], dtype=torch.float64)
    rows, columns, k = 64, 48, 20
    logits = pool[torch.randint(len(pool), (rows, columns), generator=g)].to(dtype)
    starts = torch.randint(0, columns, (rows,), generator=g)
    ends = (starts + torch.randint(0, columns, (rows,), generator=g)).clamp(max=columns)
    got = topk_per_row(logits, k, starts, ends)
    assert got.tolist() == topk_per_row_reference(logits, k, starts.tolist(), ends.tolist())


def test_decode_shaped_masked_rows() -> None:
    """vLLM's masked decode pattern (k 512): each row's tail is -inf past its length, one row
    holds finfo.min among them; every finite column comes first, in order, then -inf ones."""
    g = torch.Generator().manual_seed(5)
    lengths = [100, 511, 512, 700]
    logits = torch.full((4, 2048), -INF)
    for row, length in enumerate(lengths):
        logits[row, :length] = torch.randn(length, generator=g)
    logits[1, 300] = LOWEST
    got = topk_per_row(logits, 512)
    want = topk_per_row_reference(logits, 512, [0] * 4, [2048] * 4)
    assert got.tolist() == want
    assert 300 in got[1].tolist()


def test_the_conformance_check_covers_masked_values() -> None:
    """verify's exact check has a masked-values case, and the torch implementation passes it."""
    outcomes = {o.check: o for o in accuracy.topk_per_row(topk_per_row)}
    assert "exact/topk_per_row/masked-values" in outcomes
    assert all(o.passed for o in outcomes.values()), outcomes


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param([NAN, 1.0, -INF, NAN], [1, 0, 2, 3], id="nan-as-minus-inf-by-column"),
        pytest.param([-0.0, 0.0, LOWEST], [0, 1, 2, -1], id="signed-zeros-equal"),
    ],
)
def test_reference_order(values: list[float], expected: list[int]) -> None:
    """The reference itself follows the documented order (NaN used to break its sort)."""
    assert topk_per_row_reference(_row(values), 4, [0], [len(values)]) == [expected]


# The same class in the samplers: nan_to_num with an unnamed infinity replaces it by the dtype's
# extreme, which then ties with a real logit of that value.
@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param([-INF, LOWEST, NAN], 1, id="min-beats-minus-inf"),
        pytest.param([NAN, -INF, -INF], 0, id="nothing-finite-is-0"),
        pytest.param([-INF, NAN, -INF, LOWEST], 3, id="min-after-nan"),
        pytest.param([1.0, INF, torch.finfo(torch.float32).max, INF], 1, id="first-plus-inf"),
    ],
)
def test_greedy_ranks_min_above_minus_inf(values: list[float], expected: int) -> None:
    """greedy: a finite finfo.min is a real logit, above -inf and NaN."""
    from kernelpolicy.kernels.torch_impl import greedy

    assert greedy(_row(values)).tolist() == [expected]


@pytest.mark.parametrize(
    "vocab", [pytest.param(64, id="sorted-blocks"), pytest.param(8192, id="binned")]
)
def test_top_p_gives_plus_inf_all_the_mass(vocab: int) -> None:
    """Top-p on rows with +inf logits and a real finfo.max one: only the +inf tokens are ever
    drawn (the finite one used to share the mass, standing in for +inf itself)."""
    from kernelpolicy.kernels.torch_impl import top_k_top_p
    from kernelpolicy.kernels.torch_sampling import blocks

    logits = torch.zeros(256, vocab)
    logits[:, [0, 2]] = INF
    logits[:, 1] = torch.finfo(torch.float32).max
    p = torch.full((256,), 0.9)
    generators = {row: torch.Generator().manual_seed(row) for row in range(256)}
    drawn = set(top_k_top_p(logits, None, p, generators).tolist())
    assert drawn == {0, 2}
    assert blocks.kept_mask(logits[:1], p[:1])[0, :3].tolist() == [True, False, True]
