"""The torch fallbacks: correct on CPU and CUDA for float32/bfloat16/float16, NaN- and inf-safe,
reproducible with per-row generators, and free of host synchronisation.

Signatures (the same for every implementation of a feature):

* ``top_k_top_p(logits, k, p, generators=None, *, k_max=None) -> int64 [batch]``
  (:class:`kernelpolicy.kernels.TopKTopP`)
* ``greedy(logits) -> int64 [batch]``
* ``rmsnorm(x, weight, eps, residual=None) -> out`` or ``(out, residual)``
* ``allreduce_rmsnorm(x, residual, weight, eps, group=None) -> (out, residual)``
* ``topk_per_row(logits, k, row_starts=None, row_ends=None) -> int32 [rows, k]``
"""

from __future__ import annotations

from typing import Any

import torch

from kernelpolicy.kernels import top_k_top_p_entry
from kernelpolicy.kernels import torch_sampling as sampling
from kernelpolicy.kernels.torch_sampling import Generators, binned, blocks
from kernelpolicy.kernels.torch_sampling.top_k import SORT_ROWS, top_p_by_sort

__all__ = [
    "Generators",
    "allreduce_rmsnorm",
    "greedy",
    "rmsnorm",
    "top_k_top_p",
    "topk_per_row",
]


@top_k_top_p_entry
def top_k_top_p(
    logits: torch.Tensor,
    k: torch.Tensor | None,
    p: torch.Tensor | None,
    generators: Generators = None,
    *,
    k_max: int | None = None,
) -> torch.Tensor:
    """Sample one token per row after top-k and then top-p filtering, as
    :class:`kernelpolicy.kernels.TopKTopP` says (its exact reference), on the CPU or a GPU. A
    ``k`` on the host is read for free; on the GPU, ``k_max`` spares the synchronisation."""
    vocab = logits.shape[-1]
    u = sampling.uniforms(logits.shape[0], logits.device, generators)
    if k is None and p is None:
        return sampling.draw(sampling.weights(sampling.prepare(logits))[0], u)
    if k is None:  # top-p alone: no sort at vocabulary size, but of a few rows on a GPU
        return _top_p(logits, p, u)  # type: ignore[arg-type]
    x = sampling.prepare(logits)
    # Top-k first: one top-k over the vocabulary; the rest works on [batch, k] candidates.
    k = k.to(torch.int64)
    k = torch.where((k <= 0) | (k >= vocab), vocab, k)
    # k on the host is read for free (rows without top-k count as vocab); on the GPU, k_max
    # spares the synchronisation and must bound every row's k
    on_host = k.device.type == "cpu" or k_max is None
    bound = min(vocab, int(k.max()) if on_host else int(k_max))  # type: ignore[arg-type]
    k = k.to(x.device).clamp(max=bound)
    values, indices = sampling.top_k_candidates(x, k, bound)
    w, _ = sampling.weights(values)
    if p is not None:
        w = w.masked_fill(sampling.top_p_mask_sorted(w, p), 0.0)
    return indices.gather(-1, sampling.draw(w, u).unsqueeze(-1)).squeeze(-1)


def top_p_path(device_type: str, rows: int) -> str:
    """How top-p alone is computed: ``"binned"`` on the CPU; on a GPU, ``"sort"`` for up to
    :data:`~kernelpolicy.kernels.torch_sampling.top_k.SORT_ROWS` rows (launch-bound), else
    ``"blocks"``."""
    if device_type == "cpu":
        return "binned"
    return "sort" if rows <= SORT_ROWS else "blocks"


def _top_p(logits: torch.Tensor, p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    path = top_p_path(logits.device.type, logits.shape[0])
    if path == "sort":
        return top_p_by_sort(logits, p, u)
    if path == "blocks":
        return blocks.top_p(logits, p, u)
    return binned.top_p(logits, p, u)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Argmax per row, never outside ``[0, vocab)``: NaN ranks as ``-inf`` (the lower id first
    among equal values), so NaN never wins over a finite value and a row with nothing finite
    gives 0.

    One NaN-replacing pass and the argmax (on an H100 at 1024 x 128256: 3x the cost of reading
    the logits once, where ``torch.where(isnan(...))`` took 5x). Every infinity is named:
    ``nan_to_num`` replaces an unnamed one by the dtype's extreme, which would tie with a real
    logit of that value.
    """
    inf = float("inf")
    return torch.nan_to_num(logits, nan=-inf, posinf=inf, neginf=-inf).argmax(dim=-1)


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

    The order is exact for any value: descending logit, ``-inf`` and NaN (ranked as ``-inf``)
    below every finite value, and among equal values the lower column first (``0.0`` and
    ``-0.0`` are equal), on every device. Columns outside the range are masked out, never
    ranked by a stand-in value: a finite logit, ``finfo.min`` included, never ties with one.

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
    take = min(k, columns)
    indices = _top_columns(logits, valid, take)
    count = (ends - starts).clamp(min=0, max=columns)
    local = (indices - starts.unsqueeze(1)).to(torch.int32)
    local = torch.where(torch.arange(take, device=logits.device) < count.unsqueeze(1), local, -1)
    if take == k:
        return local
    padded = torch.full((rows, k), -1, dtype=torch.int32, device=logits.device)
    padded[:, :take] = local
    return padded


def _top_columns(logits: torch.Tensor, valid: torch.Tensor, take: int) -> torch.Tensor:
    """The ``take`` first columns of each row in the order of :func:`topk_per_row`, valid
    columns before masked ones.

    Each column gets a distinct int64 key that orders exactly as (valid, value, lower column):
    the value's float32 bits made order-preserving (a signed integer compare then matches the
    float compare) for a valid column, one key below all of those for a masked one, and the
    column in the low digits. ``torch.topk`` of distinct keys has no ties to break, so its
    answer is the same on every device. float64 logits do not fit beside a column number: they
    take a stable sort.
    """
    columns = logits.shape[1]
    if logits.dtype == torch.float64:
        return _top_columns_sorted(logits, valid, take)
    x = logits.float() + 0.0  # -0.0 + 0.0 is 0.0: equal values, one key
    x = torch.where(torch.isnan(x), float("-inf"), x)  # NaN ranks as -inf (never a real value)
    bits = x.view(torch.int32)
    ordered = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(torch.int64)  # negatives: low bits flipped
    # The mask decides, not a value: valid keys from 0 up, every masked one at -1.
    ranked = torch.where(valid, ordered + 2**31, -1)
    span = max(columns, 1)  # keys stay within int64 up to 2**30 columns
    keys = ranked * span + (span - 1 - torch.arange(columns, device=logits.device))
    return torch.topk(keys, take, dim=-1).indices


def _top_columns_sorted(logits: torch.Tensor, valid: torch.Tensor, take: int) -> torch.Tensor:
    """:func:`_top_columns` by two stable sorts: by value, then valid columns first."""
    x = torch.where(torch.isnan(logits), float("-inf"), logits + 0.0)
    by_value = torch.sort(x, dim=-1, descending=True, stable=True).indices
    first_valid = torch.sort(
        valid.gather(-1, by_value).to(torch.int8), dim=-1, descending=True, stable=True
    ).indices
    return by_value.gather(-1, first_valid)[:, :take]
