"""Exact references in float64: the filtered sampling distribution, RMSNorm, and top-k per row."""

from __future__ import annotations

import torch


def filtered_probs(logits: torch.Tensor, k: int | None, p: float | None) -> torch.Tensor:
    """``softmax`` of the exactly top-k- then top-p-filtered logits, in float64, per row.

    Top-k keeps the k largest logits; top-p then keeps the smallest prefix (by probability,
    descending) whose mass reaches p among the survivors. Zero probability outside.
    """
    x = logits.double()
    if k is not None and 0 < k < x.shape[-1]:
        kth = x.topk(k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if p is not None and p < 1.0:
        probs = torch.softmax(x, dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop_sorted = before >= p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        x = x.masked_fill(drop, float("-inf"))
    return torch.softmax(x, dim=-1)


def rmsnorm64(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.double()
    return h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.double()


def topk_per_row_reference(
    logits: torch.Tensor, k: int, starts: list[int], ends: list[int]
) -> list[list[int]]:
    """Plain Python: sort each row's valid columns by value, local indices, -1 padded."""
    out = []
    for row, (start, end) in enumerate(zip(starts, ends, strict=True)):
        values = logits[row, start:end].tolist()
        order = sorted(range(len(values)), key=lambda i: values[i], reverse=True)[:k]
        out.append(order + [-1] * (k - len(order)))
    return out
