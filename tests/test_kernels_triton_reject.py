"""The wide nucleus by rejection (kernelpolicy.kernels.sampling_triton.reject), run by Triton's
interpreter: each wide row proposes tokens from its whole softmax and keeps the first inside
its nucleus. Checked against a float64 reference of the same rule, per row, with proposals on
an even grid: the kept token is the reference's, the kept tokens are an exact quadrature of the
nucleus distribution, and a row whose proposals all fall outside is drawn by the exact wide
kernels instead."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined
pytest.importorskip("triton")

from kernelpolicy.kernels.sampling_triton import Draws
from kernelpolicy.verify.reference import filtered_probs
from tests.helpers import TritonSampler

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def sample() -> TritonSampler:
    """A sampler of its own for the test, with small tiles on CPU."""
    return TritonSampler(small=DEVICE == "cpu")


def _grid_proposals(sample: TritonSampler, proposals: int) -> list[torch.Tensor]:
    """Proposal r of row i at u = (i + (r + 1) / (proposals + 1)) / rows, for every row."""
    sample.tuning["proposals"] = proposals
    seen: list[torch.Tensor] = []

    def grid(batch: int, count: int, device: torch.device, generators: object) -> torch.Tensor:
        assert count == proposals
        r = (torch.arange(proposals, dtype=torch.float64) + 1) / (proposals + 1)
        q = ((torch.arange(batch, dtype=torch.float64)[:, None] + r[None, :]) / batch).float()
        seen.append(q)
        return q.to(device)

    sample.draws = Draws(proposals=grid)
    return seen


def _reference(row: torch.Tensor, p: float, q: torch.Tensor) -> int | None:
    """The first proposal inside the nucleus, or None, in float64: a proposal
    is the inverse CDF of the softmax in token order; a token is inside when the mass before it
    (larger logits, equal ones of lower id) is below p times the total."""
    w = torch.exp(row.double() - row.max())
    z = float(w.sum())
    cum = torch.cumsum(w, 0)
    picks = [int(torch.searchsorted(cum, float(u) * z, right=True).clamp(max=len(row) - 1))
             for u in q]  # fmt: skip
    for token in picks:
        x = row[token]
        before = float(w[(row > x) | ((row == x) & (torch.arange(len(row)) < token))].sum())
        if before < p * z:
            return token
    return None


CASES = [
    pytest.param(0.3, 0.9, 8, False, id="wide-p0.9-8-proposals"),
    pytest.param(0.3, 0.5, 1, False, id="wide-p0.5-one-proposal"),
    pytest.param(0.05, 0.9, 2, False, id="flat-p0.9-two-proposals"),
    # half the rows keep none of the first step's 2 proposals: the second step checks the rest
    pytest.param(0.3, 0.3, 8, True, id="p0.3-second-step"),
    pytest.param(0.3, 0.9, 3, False, id="p0.9-3-proposals"),
]


@pytest.mark.parametrize(("scale", "p", "proposals", "second_step"), CASES)
def test_the_first_proposal_inside_the_nucleus_is_kept(
    sample: TritonSampler, scale: float, p: float, proposals: int, second_step: bool
) -> None:
    seen = _grid_proposals(sample, proposals)
    row = torch.randn(1000, generator=torch.Generator().manual_seed(11)) * scale
    rows = 32
    ids = sample(row.expand(rows, -1).contiguous().to(DEVICE), None, torch.full((rows,), p)).cpu()
    nucleus = filtered_probs(row[None], None, p)[0] > 0
    assert int(nucleus.sum()) > sample.sampler.tuning.small  # wide here: the rows take this path
    assert bool(nucleus[ids].all())  # kept or drawn by the exact kernels: inside either way
    rejected = 0
    for i in range(rows):
        kept = _reference(row, p, seen[0][i])
        if kept is None:
            rejected += 1  # the exact wide kernels drew it (inside, checked above)
        else:
            assert int(ids[i]) == kept, f"row {i}"
    assert rejected < rows
    if second_step:  # some rows kept none of the first step's proposals
        steps = [
            _reference(row, p, seen[0][i, : sample.sampler.tuning.reject_first])
            for i in range(rows)
        ]
        assert any(kept is None for kept in steps)


@pytest.mark.parametrize(
    ("proposals", "first", "step", "steps"),
    [
        pytest.param(8, 2, 8, [(0, 2), (2, 8)], id="two-then-the-rest"),
        pytest.param(8, 4, 4, [(0, 4), (4, 4)], id="two-steps-of-4"),
        pytest.param(8, 1, 2, [(0, 1), (1, 2), (3, 2), (5, 2), (7, 2)], id="one-then-pairs"),
        pytest.param(3, 4, 4, [(0, 4)], id="fewer-than-the-first-step"),
        pytest.param(0, 2, 8, [], id="no-proposals"),
    ],
)
def test_reject_steps(proposals: int, first: int, step: int, steps: list[tuple[int, int]]) -> None:
    from kernelpolicy.kernels.sampling_triton.launch import reject_steps

    assert reject_steps(proposals, first, step) == steps


@pytest.mark.parametrize(
    ("tied", "p"),
    [
        pytest.param(300, 0.5, id="300-tied-cut-at-half"),
        pytest.param(250, 0.6, id="250-tied-cut-at-0.6"),
    ],
)
def test_ties_at_the_boundary_keep_the_lowest_ids(
    sample: TritonSampler, tied: int, p: float
) -> None:
    """A tied group across the cut: only its lowest ids are inside, so a proposal on one of its
    higher ids is rejected; the kept tokens are an even quadrature of the nucleus."""
    seen = _grid_proposals(sample, 1)
    row = torch.full((512,), -30.0)
    row[:tied] = 1.0
    row[tied : tied + 200] = 0.0
    rows = 40  # proposals on some 30 tied tokens, 7 to 12 of them past the cut
    ids = sample(row.expand(rows, -1).contiguous().to(DEVICE), None, torch.full((rows,), p)).cpu()
    expected = filtered_probs(row[None], None, p)[0]
    assert 0 < int((expected[:tied] > 0).sum()) < tied  # the cut falls inside the ties
    # every token inside: a proposal past the cut was rejected (its row drawn exactly)
    assert bool((expected[ids] > 0).all())
    counts = torch.zeros(512, dtype=torch.float64)
    for i in range(rows):
        kept = _reference(row, p, seen[0][i])
        if kept is not None:
            assert int(ids[i]) == kept
            counts[kept] += 1
    # the kept proposals alone: rows * (mass of the token in the whole softmax)
    whole = torch.softmax(row.double(), 0)
    inside = expected > 0
    assert float((counts[inside] - rows * whole[inside]).abs().max()) <= 1.0 + 1e-6
    assert float(counts[~inside].sum()) == 0.0


def test_proposal_kernels_that_fail_to_build_leave_the_rows_to_the_exact_kernels(
    sample: TritonSampler,
) -> None:
    """A build failure of the proposal kernels costs speed, not the call: the wide rows go to
    the exact wide kernels (checked here as an even quadrature of the nucleus), and the failure
    is remembered per dtype so the next call does not try again."""
    sample.draws = Draws(
        uniform=lambda batch, device, generators: (torch.arange(batch, device=device) + 0.5) / batch
    )
    tries: list[int] = []

    class Broken:
        def __getitem__(self, grid: object) -> object:
            def launch(*args: object, **kwargs: object) -> None:
                tries.append(1)
                raise RuntimeError("PassManager::run failed (planted)")

            return launch

    sample.kernels["propose_kernel"] = Broken()
    row = torch.randn(1, 1000, generator=torch.Generator().manual_seed(2)) * 0.3
    expected = filtered_probs(row, None, 0.9)[0]
    rows = 8  # the exact wide kernels' draws are test_kernels_triton's; here, that they take them
    for _ in range(2):
        ids = sample(row.expand(rows, -1).contiguous().to(DEVICE), None, torch.full((rows,), 0.9))
        ids = ids.cpu()
        assert bool((expected[ids] > 0).all())
        counts = torch.bincount(ids, minlength=1000).double()
        assert float((counts - rows * expected.double()).abs().max()) <= 1.0 + 1e-6
    assert tries == [1]
    assert "planted" in sample.sampler.failures.reject_failed[torch.float32]
