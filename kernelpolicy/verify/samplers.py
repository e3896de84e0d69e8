"""The verify suite's checks of samplers: robustness on pathological logits (every dtype the
signature promises), the id-0 contract for rows with nothing finite, shapes (batch 1, large
vocabularies, k above a kernel's own limit), and the distribution (chi-square per dtype, per-row
mixes of k/p/None, tie-heavy rows). Check names carry the dtype."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from kernelpolicy.dtypes import dtype_name
from kernelpolicy.evidence.model import Outcome
from kernelpolicy.verify.patterns import PATTERNS, damaged_rows, make_logits
from kernelpolicy.verify.reference import filtered_probs

Sampler = Callable[..., torch.Tensor]

ROBUST_BATCH, ROBUST_VOCAB, ROBUST_K, ROBUST_P = 8, 32768, 50, 0.9
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
PATHS = {"top_k": (True, False), "top_p": (False, True), "top_k_top_p": (True, True)}
DIST_VOCAB, DIST_SAMPLES, DIST_ALPHA = 32, 50_000, 1e-6
DIST_CASES = ((8, None), (16, None), (None, 0.5), (None, 0.7), (None, 0.99), (8, 0.9), (4, 0.5))


def distribution(
    sampler: Sampler, device: str = "cpu", seed: int = 0, **sizes: Any
) -> Iterator[Outcome]:
    """:func:`kernelpolicy.verify.distribution.distribution`; ``sizes`` are its keyword
    arguments (a profile's samples and cases)."""
    from kernelpolicy.verify.distribution import distribution as checks

    yield from checks(sampler, device, seed, **sizes)


def _params(batch: int, k: int | None, p: float | None, device: str) -> tuple[Any, Any]:
    kt = None if k is None else torch.full((batch,), k, dtype=torch.int64)  # host-side k
    pt = None if p is None else torch.full((batch,), p, dtype=torch.float32, device=device)
    return kt, pt


def robustness(
    sampler: Sampler, device: str = "cpu", patterns: tuple[str, ...] = PATTERNS
) -> Iterator[Outcome]:
    """Every pattern on every path and dtype: no crash, one id per row, ids in range, clean
    rows inside their own top-k/top-p support, rows with nothing finite at token 0."""
    for dtype in DTYPES:
        for path, (use_k, use_p) in PATHS.items():
            for pattern in patterns:
                name = f"robustness/{dtype_name(dtype)}/{path}/{pattern}"
                logits = make_logits(
                    pattern, ROBUST_BATCH, ROBUST_VOCAB, device=device, dtype=dtype
                )
                k, p = _params(
                    ROBUST_BATCH, ROBUST_K if use_k else None, ROBUST_P if use_p else None, device
                )
                try:
                    ids = sampler(logits, k, p)
                except Exception as exc:  # a crash is the finding
                    yield Outcome(name, False, f"raised {type(exc).__name__}: {exc}")
                    continue
                yield _judge(
                    name, ids, logits, pattern,
                    k=ROBUST_K if use_k else None, p=ROBUST_P if use_p else None,
                )  # fmt: skip


def _judge(
    name: str,
    ids: torch.Tensor,
    logits: torch.Tensor,
    pattern: str,
    *,
    k: int | None,
    p: float | None,
) -> Outcome:
    ids = ids.detach().to("cpu", torch.int64).reshape(-1)
    batch, vocab = logits.shape
    if ids.numel() != batch:
        return Outcome(name, False, f"{ids.numel()} ids for {batch} rows")
    out_of_range = [(r, int(i)) for r, i in enumerate(ids) if not 0 <= int(i) < vocab]
    if out_of_range:
        return Outcome(name, False, f"ids outside [0, {vocab}): rows {out_of_range[:4]}")
    x = logits.cpu().float()
    empty = [r for r in range(batch) if not bool((x[r] > float("-inf")).any()) and ids[r] != 0]
    if empty:
        return Outcome(name, False, f"rows {empty} have nothing finite but did not get token 0")
    support = filtered_probs(x, k, p) > 0
    bad = damaged_rows(pattern, batch)
    outside = [r for r in range(batch) if r not in bad and not support[r, ids[r]]]
    if outside:
        return Outcome(name, False, f"clean rows {outside} sampled outside their top-k/top-p set")
    return Outcome(name, True, "ok")


def greedy_robustness(
    greedy: Sampler, device: str = "cpu", patterns: tuple[str, ...] = PATTERNS
) -> Iterator[Outcome]:
    """Every pattern: one id per row, in range, and clean rows get their argmax."""
    for pattern in patterns:
        name = f"robustness/greedy/{pattern}"
        logits = make_logits(pattern, ROBUST_BATCH, ROBUST_VOCAB, device=device)
        try:
            ids = greedy(logits).detach().to("cpu", torch.int64).reshape(-1)
        except Exception as exc:
            yield Outcome(name, False, f"raised {type(exc).__name__}: {exc}")
            continue
        if ids.numel() != ROBUST_BATCH:
            yield Outcome(name, False, f"{ids.numel()} ids for {ROBUST_BATCH} rows")
            continue
        bad_ids = [(r, int(i)) for r, i in enumerate(ids) if not 0 <= int(i) < ROBUST_VOCAB]
        if bad_ids:
            yield Outcome(name, False, f"ids outside [0, {ROBUST_VOCAB}): rows {bad_ids[:4]}")
            continue
        damaged = damaged_rows(pattern, ROBUST_BATCH)
        argmax = logits.cpu().argmax(dim=-1)
        wrong = [r for r in range(ROBUST_BATCH) if r not in damaged and ids[r] != argmax[r]]
        yield Outcome(name, not wrong, f"clean rows {wrong} not at their argmax" if wrong else "ok")
