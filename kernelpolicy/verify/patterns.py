"""Pathological logits, after vLLM's TestFlashInferTopkToppRobustness: row 0 is damaged, the
other rows are clean and must be sampled as if row 0 were not there."""

from __future__ import annotations

import torch

PATTERNS = (
    "clean",
    "nan_one_row",
    "nan_few",
    "nan_at_top",
    "nan_all_rows",
    "pos_inf_one_row",
    "neg_inf_one_row",
    "mixed_inf_nan",
    "degenerate_flat",
)


def make_logits(
    pattern: str, batch: int, vocab: int, *, seed: int = 1234, device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:  # fmt: skip
    """``[batch, vocab]`` logits (N(0, 5^2)) with ``pattern`` applied to row 0 (or to all)."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, vocab, generator=generator) * 5.0
    nan, inf = float("nan"), float("inf")
    if pattern == "nan_one_row":
        logits[0, :] = nan
    elif pattern == "nan_few":
        logits[0, torch.randperm(vocab, generator=generator)[:16]] = nan
    elif pattern == "nan_at_top":
        logits[0, logits[0].topk(32).indices] = nan
    elif pattern == "nan_all_rows":
        logits[:, :] = nan
    elif pattern == "pos_inf_one_row":
        logits[0, torch.randperm(vocab, generator=generator)[:4]] = inf
    elif pattern == "neg_inf_one_row":
        logits[0, :] = -inf
    elif pattern == "mixed_inf_nan":
        idx = torch.randperm(vocab, generator=generator)
        logits[0, idx[:8]] = nan
        logits[0, idx[8:16]] = inf
        logits[0, idx[16:64]] = -inf
    elif pattern == "degenerate_flat":
        logits[0, :] = 0.0
    elif pattern != "clean":
        raise ValueError(f"unknown pattern {pattern!r}; expected one of {', '.join(PATTERNS)}")
    return logits.to(device=device, dtype=dtype)


def damaged_rows(pattern: str, batch: int) -> set[int]:
    if pattern == "clean":
        return set()
    return set(range(batch)) if pattern == "nan_all_rows" else {0}
