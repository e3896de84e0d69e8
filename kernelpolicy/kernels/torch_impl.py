"""The torch fallbacks: correct on CPU and CUDA for float32/bfloat16/float16, NaN- and inf-safe,
reproducible with per-row generators, and free of host synchronisation.

Signatures (the same for every implementation of a feature):

* ``top_k_top_p(logits, k, p, generators=None, *, k_max=None) -> int64 [batch]``
* ``greedy(logits) -> int64 [batch]``
* ``rmsnorm(x, weight, eps, residual=None) -> out`` or ``(out, residual)``
* ``allreduce_rmsnorm(x, residual, weight, eps, group=None) -> (out, residual)``
* ``topk_per_row(logits, k, row_starts=None, row_ends=None) -> int32 [rows, k]``
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

Generators = Mapping[int, torch.Generator] | None


def _clean(logits: torch.Tensor) -> torch.Tensor:
    """float32 logits where NaN is never chosen, +inf entries share all the mass, and a row with
    nothing left keeps token 0 (what torch.argmax gives an all-NaN or all -inf row)."""
    x = logits.float().masked_fill(torch.isnan(logits), float("-inf"))
    pos_inf = torch.isposinf(x)
    has_pos = pos_inf.any(dim=-1, keepdim=True)
    x = torch.where(has_pos, torch.where(pos_inf, 0.0, float("-inf")), x)
    empty = torch.isneginf(x).all(dim=-1, keepdim=True)
    first = torch.zeros_like(x, dtype=torch.bool)
    first[..., 0] = True
    return torch.where(empty & first, 0.0, x)


def _exponential(shape: Sequence[int], like: torch.Tensor, generators: Generators) -> torch.Tensor:
    """Exp(1) noise for the argmax(probs / noise) sampling trick; seeded rows use their own
    generator, so a seeded request draws the same token whatever else is in the batch."""
    noise = torch.empty(shape, dtype=torch.float32, device=like.device).exponential_()
    for row, generator in (generators or {}).items():
        noise[row].exponential_(generator=generator)
    return noise


def _sample(logits: torch.Tensor, generators: Generators) -> torch.Tensor:
    probs = torch.softmax(logits, dim=-1)
    return (probs / _exponential(probs.shape, probs, generators)).argmax(dim=-1)


def _top_p_mask(sorted_logits: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Mask (True = drop) of the tokens outside the nucleus, on logits sorted descending: keep
    the smallest prefix whose probability reaches p; the first token always stays."""
    probs = torch.softmax(sorted_logits, dim=-1)
    before = torch.cumsum(probs, dim=-1) - probs  # mass strictly before each token
    drop = before >= p.unsqueeze(-1).to(before.dtype)
    drop[..., 0] = False
    return drop


def top_k_top_p(
    logits: torch.Tensor,
    k: torch.Tensor | None,
    p: torch.Tensor | None,
    generators: Generators = None,
    *,
    k_max: int | None = None,
) -> torch.Tensor:
    """Sample one token per row after top-k and then top-p filtering.

    Args:
        logits: ``[batch, vocab]``.
        k: Per-row top-k (``<= 0`` or ``>= vocab`` means none), or ``None``.
        p: Per-row top-p (``>= 1`` means none), or ``None``.
        generators: Row -> ``torch.Generator`` for seeded requests.
        k_max: An upper bound of ``k``; without it, it is read from ``k``, which costs a device
            synchronisation when ``k`` lives on the GPU (keep ``k`` on the host, or pass this).

    Returns:
        ``int64 [batch]`` token ids, every one in ``[0, vocab)``.
    """
    vocab = logits.shape[-1]
    if k is None:
        x = _clean(logits)
        if p is None:
            return _sample(x, generators)
        # top-p alone needs the whole distribution: no fixed candidate count
        values, indices = torch.sort(x, dim=-1, descending=True)
        values = values.masked_fill(_top_p_mask(values, p), float("-inf"))
        return indices.gather(-1, _sample(values, generators).unsqueeze(-1)).squeeze(-1)
    # Top-k first: one top-k over the vocabulary; the rest works on [batch, k] candidates.
    # torch.topk ranks NaN above everything, so a row with NaNs keeps fewer real candidates;
    # _clean() then never samples the NaNs (such a row is damaged whatever we do).
    k = k.to(torch.int64)
    k = torch.where((k <= 0) | (k >= vocab), vocab, k)
    bound = min(vocab, int(k_max) if k_max is not None else int(k.max()))
    x = logits if logits.dtype == torch.float32 else logits.float()
    values, indices = torch.topk(x, bound, dim=-1)  # sorted, descending
    ranks = torch.arange(bound, device=x.device)
    values = _clean(values.masked_fill(ranks >= k.to(x.device).unsqueeze(-1), float("-inf")))
    if p is not None:
        values = values.masked_fill(_top_p_mask(values, p.to(x.device)), float("-inf"))
    return indices.gather(-1, _sample(values, generators).unsqueeze(-1)).squeeze(-1)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Argmax per row, never outside ``[0, vocab)``: NaN never wins, an all-NaN row gives 0.

    One NaN-replacing pass and the argmax (on an H100 at 1024 x 128256: 3x the cost of reading
    the logits once, where ``torch.where(isnan(...))`` took 5x).
    """
    return torch.nan_to_num(logits, nan=float("-inf"), posinf=float("inf")).argmax(dim=-1)


def rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> Any:
    """RMSNorm in float32, returned in ``x``'s dtype; with ``residual``, the fused add first and
    ``(out, x + residual)`` returned, as vLLM's fused_add_rms_norm does."""
    hidden = x.float()
    if residual is not None:
        hidden = hidden + residual.float()
    variance = hidden.pow(2).mean(dim=-1, keepdim=True)
    out = (hidden * torch.rsqrt(variance + eps) * weight.float()).to(x.dtype)
    if residual is None:
        return out
    return out, hidden.to(residual.dtype)


def allreduce_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    group: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """All-reduce ``x`` over ``group`` (torch.distributed; none or one rank: no reduction),
    then fused add + RMSNorm. Returns ``(out, residual)``."""
    reduced = x
    if group is not None:
        import torch.distributed as dist

        if dist.get_world_size(group) > 1:
            reduced = x.clone()
            dist.all_reduce(reduced, group=group)
    out, new_residual = rmsnorm(reduced, weight, eps, residual)
    return out, new_residual


def topk_per_row(
    logits: torch.Tensor,
    k: int,
    row_starts: torch.Tensor | None = None,
    row_ends: torch.Tensor | None = None,
) -> torch.Tensor:
    """Top-k column indices per row within ``[row_starts, row_ends)``, local to the row's start,
    ``-1`` where a row has fewer than ``k`` valid columns (vLLM's top_k_per_row_prefill).

    Returns:
        ``int32 [rows, k]``.
    """
    rows, columns = logits.shape
    cols = torch.arange(columns, device=logits.device)
    starts = (
        torch.zeros(rows, dtype=torch.int64, device=logits.device)
        if row_starts is None
        else row_starts.to(torch.int64)
    )
    ends = (
        torch.full((rows,), columns, dtype=torch.int64, device=logits.device)
        if row_ends is None
        else row_ends.to(torch.int64)
    )
    valid = (cols >= starts.unsqueeze(1)) & (cols < ends.unsqueeze(1))
    # Valid columns rank above every masked one, even where their logit is -inf or NaN.
    lowest = torch.finfo(torch.float32).min
    x = logits.float().nan_to_num(nan=lowest, neginf=lowest)
    x = torch.where(valid, x, float("-inf"))
    take = min(k, columns)
    _, indices = torch.topk(x, take, dim=-1)
    count = (ends - starts).clamp(min=0, max=columns)
    local = (indices - starts.unsqueeze(1)).to(torch.int32)
    local = torch.where(torch.arange(take, device=logits.device) < count.unsqueeze(1), local, -1)
    if take == k:
        return local
    padded = torch.full((rows, k), -1, dtype=torch.int32, device=logits.device)
    padded[:, :take] = local
    return padded
