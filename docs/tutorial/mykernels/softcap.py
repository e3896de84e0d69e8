"""Logit soft-capping, ``cap * tanh(logits / cap)``: a reference and an in-place variant."""

import torch


def reference(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """The plain version: allocates a new tensor."""
    return cap * torch.tanh(logits / cap)


def fused(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """The 'fast' version: works in place, so it needs a floating-point tensor it may overwrite."""
    return logits.div_(cap).tanh_().mul_(cap)
