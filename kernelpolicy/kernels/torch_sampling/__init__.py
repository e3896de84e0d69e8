"""The torch sampler: top-k and top-p filtering and the draw, with one tie rule and no sort at
vocabulary size.

Semantics (vLLM's, made deterministic): top-k keeps exactly ``k`` tokens, the largest logits,
and among logits tied at the k-th value the lowest token ids; top-p then keeps the smallest
prefix of the survivors, in descending order with ties broken by lower token id first, whose
probability reaches ``p`` (a token goes when the ascending cumulative probability up to and
including it is ``<= 1 - p``); ``p >= 1`` keeps everything. The kept tokens are drawn in
proportion to their probabilities.

Top-p alone never truncates the nucleus to a fixed candidate count, and sorts whole rows only
where that is faster: up to ``SORT_ROWS`` rows on a GPU, where the call is bound by its launches
(:func:`.top_k.top_p_by_sort`). Above that, on a GPU it searches sorted blocks of the row
(:mod:`.blocks`, a fixed sequence of operations with no host synchronisation); on the CPU a
histogram of the mass over bins of the distance to the row maximum, a few rows at a time, finds
the bin holding the boundary, and only that bin is sorted (:mod:`.binned`, :mod:`.nucleus`).
"""

from __future__ import annotations

from kernelpolicy.kernels.torch_sampling.common import (
    Generators,
    draw,
    finite_or_zero,
    pick,
    prepare,
    stable_descending,
    uniforms,
    weights,
)
from kernelpolicy.kernels.torch_sampling.top_k import top_k_candidates, top_p_mask_sorted

__all__ = [
    "Generators",
    "draw",
    "finite_or_zero",
    "pick",
    "prepare",
    "stable_descending",
    "top_k_candidates",
    "top_p_mask_sorted",
    "uniforms",
    "weights",
]
