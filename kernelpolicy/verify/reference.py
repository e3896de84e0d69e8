"""Exact references in float64: the filtered sampling distribution, RMSNorm, and top-k per row."""

from __future__ import annotations

import math

import torch


def filtered_probs(logits: torch.Tensor, k: int | None, p: float | None) -> torch.Tensor:
    """``softmax`` of the exactly top-k- then top-p-filtered logits, in float64, per row.

    The order is descending logit, ties by lower token id (a stable sort). Top-k keeps the first
    k in that order (exactly k, also when the k-th value is tied); top-p then drops, among the
    survivors, every token whose ascending cumulative probability (itself and everything after
    it in that order) is ``<= 1 - p`` (vLLM's rule), the first token always kept; ``p >= 1``
    keeps all. Zero probability outside.
    """
    x = logits.double().nan_to_num(nan=float("-inf"))
    values, order = x.sort(dim=-1, descending=True, stable=True)
    drop = torch.zeros_like(values, dtype=torch.bool)
    if k is not None and 0 < k < x.shape[-1]:
        drop[..., k:] = True
    if p is not None and p < 1.0:
        probs = torch.softmax(values.masked_fill(drop, float("-inf")), dim=-1)
        at_or_below = probs.flip(-1).cumsum(dim=-1).flip(-1)
        cut = at_or_below <= 1.0 - p
        cut[..., 0] = False
        drop |= cut
    x = x.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return torch.softmax(x, dim=-1)


def rmsnorm64(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.double()
    return h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.double()


def topk_per_row_reference(
    logits: torch.Tensor, k: int, starts: list[int], ends: list[int]
) -> list[list[int]]:
    """Plain Python: each row's valid columns by descending value, local indices, -1 padded.

    NaN ranks as ``-inf``; among equal values the lower column comes first (Python's sort is
    stable, also in reverse, and ``0.0 == -0.0``). Only the columns in the range are ranked.
    """
    out = []
    for row, (start, end) in enumerate(zip(starts, ends, strict=True)):
        values = [-math.inf if math.isnan(v) else v for v in logits[row, start:end].tolist()]
        order = sorted(range(len(values)), key=lambda i: values[i], reverse=True)[:k]
        out.append(order + [-1] * (k - len(order)))
    return out
