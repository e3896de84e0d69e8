"""Distribution checks of samplers: chi-square of 50,000 draws against the exact filtered
softmax (kernelpolicy.verify.reference), per dtype, for per-row mixes of k/p/None in one
batch, and for tie-heavy rows (logits rounded through bfloat16; tied groups straddling the top-k
and top-p boundaries, where the lowest ids must stay), and a nucleus of most of a large
vocabulary per dtype (the path a sampler takes when the nucleus outgrows its candidate buffers).
Plus shapes: batch 1, large vocabularies, and k above a kernel's own limit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from kernelpolicy.dtypes import dtype_name
from kernelpolicy.evidence.model import Outcome
from kernelpolicy.verify.reference import filtered_probs

Sampler = Callable[..., torch.Tensor]
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
VOCAB, SAMPLES, ALPHA = 32, 50_000, 1e-6
CASES = ((8, None), (16, None), (None, 0.5), (None, 0.7), (None, 0.99), (8, 0.9), (4, 0.5))
MIXED = ((5, 1.0), (0, 0.8), (0, 1.0), (10, 0.6))  # per row: k 0 = none, p 1.0 = none
TIE_CASES = ((6, None), (None, 0.5), (16, 0.8), (3, 0.9))
SHAPES = ((1, 151936), (3, 262144))  # batch, vocab
BIG_K = (300, 1024)  # above the Triton kernel's MAX_K, and far above
# the wide nucleus: N(0, 1) logits over WIDE_VOCAB tokens keep about 12,000 at p WIDE_P, more
# than any sampler's candidate buffer (Triton's: 1,024); drawn in chunks of WIDE_CHUNK rows,
# judged token by token where the probability is 0 and by chi-square over WIDE_BINS bins of
# tokens of neighbouring probability elsewhere
WIDE_VOCAB, WIDE_P, WIDE_SAMPLES, WIDE_CHUNK, WIDE_BINS = 16384, 0.9, 20_000, 5_000, 128


def _full(batch: int, value: float | None, dtype: torch.dtype, device: str) -> Any:
    if value is None:
        return None
    if dtype == torch.int64:
        return torch.full((batch,), int(value), dtype=dtype)  # k stays on the host
    return torch.full((batch,), value, dtype=dtype, device=device)


def chi_square(name: str, ids: torch.Tensor, expected: torch.Tensor) -> Outcome:
    """Draws ``ids`` against probabilities ``expected``: none where it is 0, chi-square over
    the rest at level ALPHA."""
    from scipy.stats import chisquare

    n, vocab = ids.numel(), expected.numel()
    counts = torch.bincount(ids.cpu().clamp(0, vocab), minlength=vocab + 1)
    impossible = int(counts[:vocab][expected == 0].sum()) + int(counts[vocab:].sum())
    if impossible:
        return Outcome(name, False, f"{impossible} samples where the expected probability is 0")
    support = expected > 0
    if int(support.sum()) <= 1:
        return Outcome(name, True, "one token possible, always drawn")
    test = chisquare(counts[:vocab][support].double().numpy(), (expected[support] * n).numpy())
    detail = f"chi2={test.statistic:.1f}, p-value={test.pvalue:.3g} over {int(support.sum())}"
    passed = bool(test.pvalue >= ALPHA)
    return Outcome(name, passed, detail if passed else f"{detail} < alpha {ALPHA}")


def _run(name: str, sampler: Sampler, *args: Any) -> torch.Tensor | Outcome:
    try:
        return sampler(*args).detach().to("cpu", torch.int64).reshape(-1)
    except Exception as exc:  # a crash is the finding
        return Outcome(name, False, f"raised {type(exc).__name__}: {exc}")


def _same_row(
    sampler: Sampler,
    name: str,
    row: torch.Tensor,
    *,
    k: int | None,
    p: float | None,
    device: str,
    samples: int = SAMPLES,
) -> Outcome:
    logits = row.expand(samples, -1).contiguous().to(device)
    kt, pt = _full(samples, k, torch.int64, device), _full(samples, p, torch.float32, device)
    ids = _run(name, sampler, logits, kt, pt)
    if isinstance(ids, Outcome):
        return ids
    expected = filtered_probs(row.float(), k, p)[0]
    outcome = chi_square(name, ids, expected)
    if outcome.passed or not name.startswith("ties/"):
        return outcome
    return _tie_rule(outcome, ids, row.float()[0], expected)


TIE_RULE = "which tied tokens are kept"


def _tie_rule(failed: Outcome, ids: torch.Tensor, row: torch.Tensor, expected: Any) -> Outcome:
    """A tie check that failed: does the sampler keep the same values, choosing other ids among
    the tied ones (FlashInfer keeps exactly k tokens, not the lowest ids; vLLM's reference keeps
    every tied one)? Then it differs from kernelpolicy's convention (:data:`TIE_RULE`) and is
    right under its own: the draws of each value follow the reference's mass of that value
    (which of the tied ids, and how many of them, is the convention)."""
    values, group = torch.unique(row, return_inverse=True)
    mass = torch.zeros(len(values), dtype=torch.float64).index_add_(0, group, expected.double())
    by_value = chi_square(failed.check, group[ids.clamp(0, row.numel() - 1)], mass)
    if not by_value.passed:
        return failed
    return Outcome(
        failed.check, False,
        f"{failed.detail}; by value (ids among tied ones free): {by_value.detail}",
        convention=TIE_RULE,
    )  # fmt: skip


def tie_row() -> torch.Tensor:
    """12 tokens tied at 1.0, 12 at 0.0, 8 at -1.0, shuffled so ids do not follow values."""
    values = torch.tensor([1.0] * 12 + [0.0] * 12 + [-1.0] * 8)
    return values[torch.randperm(VOCAB, generator=torch.Generator().manual_seed(11))][None]


Case = tuple[int | None, float | None]


def distribution(
    sampler: Sampler,
    device: str = "cpu",
    seed: int = 0,
    *,
    samples: int = SAMPLES,
    wide_samples: int = WIDE_SAMPLES,
    cases: tuple[Case, ...] = CASES,
    tie_cases: tuple[Case, ...] = TIE_CASES,
) -> Iterator[Outcome]:
    """Every distribution check, ``samples`` draws per case (the full suite's sizes unless a
    profile passes its own: :mod:`kernelpolicy.verify.profile`)."""
    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(1, VOCAB, generator=generator) * 2.0
    wide = torch.randn(1, WIDE_VOCAB, generator=torch.Generator().manual_seed(seed + 1))
    for dtype in DTYPES:
        row = base.to(dtype)
        for k, p in cases:
            name = f"distribution/{dtype_name(dtype)}/k={k or '-'},p={p or '-'}"
            yield _same_row(sampler, name, row, k=k, p=p, device=device, samples=samples)
        yield _mixed(sampler, row, device, samples)
        yield wide_nucleus(sampler, wide.to(dtype), device, wide_samples)
    rounded = (1.0 + 0.05 * torch.randn(1, VOCAB, generator=generator)).bfloat16()
    for k, p in tie_cases:
        tag = f"k={k or '-'},p={p or '-'}"
        for name, row in ((f"ties/bfloat16/bf16-rounded/{tag}", rounded),
                          (f"ties/float32/tied-groups/{tag}", tie_row())):  # fmt: skip
            yield _same_row(sampler, name, row, k=k, p=p, device=device, samples=samples)
    yield from _shapes(sampler, device)


def _mixed(sampler: Sampler, row: torch.Tensor, device: str, samples: int = SAMPLES) -> Outcome:
    """Rows of one batch with different k/p (0 and 1.0 meaning none), as vLLM passes them."""
    name = f"distribution/{dtype_name(row.dtype)}/mixed-rows"
    per = samples // len(MIXED)
    logits = row.expand(per * len(MIXED), -1).contiguous().to(device)
    k = torch.tensor([m[0] for m in MIXED]).repeat_interleave(per)
    p = torch.tensor([m[1] for m in MIXED], dtype=torch.float32).repeat_interleave(per)
    ids = _run(name, sampler, logits, k, p.to(device))
    if isinstance(ids, Outcome):
        return ids
    details = []
    for i, (kk, pp) in enumerate(MIXED):
        part = chi_square(
            name, ids[i * per : (i + 1) * per], filtered_probs(row.float(), kk or None, pp)[0]
        )
        if not part.passed:
            return Outcome(name, False, f"rows with k={kk}, p={pp}: {part.detail}")
        details.append(part.detail.split(",")[1].strip())
    return Outcome(name, True, "; ".join(details))


def wide_nucleus(
    sampler: Sampler, row: torch.Tensor, device: str, samples: int = WIDE_SAMPLES
) -> Outcome:
    """A nucleus of most of the vocabulary (see WIDE_VOCAB): no draw outside it, and the
    filtered softmax by chi-square over bins of tokens ranked by probability. In bfloat16 and
    float16 the row has many exact ties, the boundary's among them."""
    name = f"distribution/{dtype_name(row.dtype)}/wide-nucleus"
    parts = []
    for start in range(0, samples, WIDE_CHUNK):
        rows = min(WIDE_CHUNK, samples - start)
        logits = row.expand(rows, -1).contiguous().to(device)
        ids = _run(name, sampler, logits, None, _full(rows, WIDE_P, torch.float32, device))
        if isinstance(ids, Outcome):
            return ids
        parts.append(ids)
    ids = torch.cat(parts)
    expected = filtered_probs(row.float(), None, WIDE_P)[0]
    counts = torch.bincount(ids.clamp(0, WIDE_VOCAB), minlength=WIDE_VOCAB + 1)
    outside = int(counts[:WIDE_VOCAB][expected == 0].sum()) + int(counts[WIDE_VOCAB:].sum())
    if outside:
        return Outcome(name, False, f"{outside} samples outside the nucleus")
    # bins of tokens of neighbouring probability, so that a bias towards likelier (or less
    # likely) tokens shows; bins of ids would average it away
    order = torch.sort(expected, descending=True, stable=True).indices
    bin_of = torch.empty(WIDE_VOCAB, dtype=torch.int64)
    bin_of[order] = torch.arange(WIDE_VOCAB) // (WIDE_VOCAB // WIDE_BINS)
    binned = chi_square(
        name,
        bin_of[ids],
        torch.zeros(WIDE_BINS, dtype=expected.dtype).index_add_(0, bin_of, expected),
    )
    kept = int((expected > 0).sum())
    return Outcome(
        name, binned.passed, f"{kept} tokens kept, in bins by probability: {binned.detail}"
    )


def _shapes(sampler: Sampler, device: str) -> Iterator[Outcome]:
    """Batch 1 and large vocabularies, and k above a kernel's own limit: ids inside the
    filtered support."""
    generator = torch.Generator().manual_seed(5)
    cases: list[tuple[int, int, int, float | None]] = [(b, v, 50, 0.9) for b, v in SHAPES]
    cases += [(4, 32768, k, p) for k in BIG_K for p in (None, 0.9)]
    for batch, vocab, k, p in cases:
        name = f"shapes/float32/batch={batch},vocab={vocab},k={k},p={p or '-'}"
        logits = torch.randn(batch, vocab, generator=generator) * 3.0
        kt, pt = _full(batch, k, torch.int64, device), _full(batch, p, torch.float32, device)
        ids = _run(name, sampler, logits.to(device), kt, pt)
        if isinstance(ids, Outcome):
            yield ids
            continue
        support = filtered_probs(logits, k, p) > 0
        ok = ids.numel() == batch and bool(
            support[torch.arange(batch), ids.clamp(0, vocab - 1)].all()
        )
        yield Outcome(name, ok, "ids inside the filtered support" if ok else f"ids {ids.tolist()}")
