"""Top-k candidates with the lowest-id tie rule, the top-p cut on sorted candidates, and top-p
alone by one sort of whole rows (a few rows on a GPU, where the call is bound by launches)."""

from __future__ import annotations

import torch

from kernelpolicy.kernels.torch_sampling.common import draw, prepare, stable_descending, weights

SORT_ROWS = 64
"""Rows up to which top-p alone on a GPU sorts whole rows instead of searching sorted blocks:
on the H100 (2026-11-26, vocabulary 128256, float32 and bfloat16) one stable sort of every row
took 1.0-1.2 ms at batch 1, 1.3 ms at 32 and 1.8 ms at 64, the blocks 2.1, 2.2 and 3.1-3.3 ms
(about 100 launches); at 96 and 128 each won in some cases, from 160 the blocks (the sort
4.1-4.2 ms at 160 and 5.5 ms at 256 against 2.3-3.7 ms) (benchmarks/README.md, "The torch top-p
on the lent H100: whole rows sorted at small batches")."""


def top_k_candidates(
    x: torch.Tensor, k: torch.Tensor, bound: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``bound`` largest logits of each row, sorted descending with ties by lower id, the
    tokens tied at each row's k-th value replaced by the lowest ids among the whole row's ties.

    Returns:
        ``(values, ids)``, both ``[batch, bound]``.
    """
    vocab = x.shape[-1]
    values, ids = torch.topk(x, min(bound + 1, vocab), dim=-1)
    kth = values.gather(1, (k - 1).clamp(0, bound - 1).unsqueeze(-1))
    # A tie at the k-th value can reach past the candidates only when the one after the last
    # equals it; the CPU checks (a free host read), the GPU always repairs: on the H100,
    # torch.topk did not return the lowest ids of a tied group (verify, 2026-11-23).
    outside = bound < vocab and (x.device.type != "cpu" or bool((values[:, bound:] == kth).any()))
    values, ids = values[:, :bound], ids[:, :bound]
    greater = (values > kth).sum(dim=-1, keepdim=True)
    if outside:
        tied = x == kth
        rank = torch.cumsum(tied.to(torch.float32), dim=-1).to(torch.int64)  # 1-based
        slot = torch.where(tied & (rank <= bound - greater), greater + rank - 1, bound)
        token = torch.arange(vocab, device=x.device).expand_as(x)
        spare = torch.cat([ids, ids[:, :1]], dim=-1)  # the last column takes the rest
        ids = spare.scatter_(1, slot, token)[:, :bound]
    values, ids = stable_descending(values, ids)
    # exactly k: the greater ones, then the ties in id order
    kept = torch.arange(bound, device=x.device) < k.unsqueeze(-1)
    return values.masked_fill(~kept, float("-inf")), ids


def top_p_mask_sorted(w: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Drop mask of the tokens outside the nucleus, on weights sorted by descending logit (ties
    already in id order): the ascending cumulative probability up to each token ``<= 1 - p``;
    the first token always stays, and ``p >= 1`` drops nothing."""
    w64 = w.to(torch.float64)
    at_or_below = w64.flip(-1).cumsum(dim=-1).flip(-1) / w64.sum(dim=-1, keepdim=True)
    p = p.to(device=w.device, dtype=torch.float64).reshape(-1, 1)
    drop = (at_or_below <= 1.0 - p) & (p < 1.0)
    drop[..., 0] = False
    return drop


def top_p_by_sort(logits: torch.Tensor, p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Top-p alone by one stable sort of every row: descending logits with ties by lower id
    (the tie rule), the cut of :func:`top_p_mask_sorted`, the draw at ``u`` (``[batch, 1]``).

    Returns:
        ``int64 [batch]`` token ids.
    """
    values, ids = prepare(logits).sort(dim=-1, descending=True, stable=True)
    w, _ = weights(values)
    w = w.masked_fill(top_p_mask_sorted(w, p), 0.0)
    return ids.gather(-1, draw(w, u).unsqueeze(-1)).squeeze(-1)
