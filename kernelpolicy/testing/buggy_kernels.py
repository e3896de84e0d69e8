"""Kernels with planted bugs, to show that the verify suite catches them.

``greedy_out_of_range`` reproduces the aiter greedy-sampling bug from the SGLang report: for an
all-NaN or all -inf row it returns ``vocab_size``, an id outside the vocabulary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from kernelpolicy.kernels import top_k_top_p_entry

if TYPE_CHECKING:
    from kernelpolicy.kernels.torch_impl import Generators


def greedy_out_of_range(logits: torch.Tensor) -> torch.Tensor:
    ids = torch.where(torch.isnan(logits), float("-inf"), logits.float()).argmax(dim=-1)
    dead = torch.isnan(logits).all(dim=-1) | torch.isneginf(logits).all(dim=-1)
    return torch.where(dead, logits.shape[-1], ids)


@top_k_top_p_entry
def top_k_ignores_k(
    logits: torch.Tensor,
    k: torch.Tensor | None,
    p: torch.Tensor | None,
    generators: Generators = None,
    *,
    k_max: int | None = None,
) -> torch.Tensor:
    """Samples from the full softmax whatever k and p say (a filtering bug)."""
    x = torch.nan_to_num(logits.float(), nan=-1e30, posinf=1e30, neginf=-1e30)
    probs = torch.softmax(x, dim=-1)
    return torch.multinomial(probs, 1).squeeze(-1)


@top_k_top_p_entry
def sampler_fails_when_called(
    logits: torch.Tensor,
    k: torch.Tensor | None,
    p: torch.Tensor | None,
    generators: Generators = None,
    *,
    k_max: int | None = None,
) -> torch.Tensor:
    """Imports fine, raises on every call, as a kernel whose compile fails for a dtype does."""
    raise RuntimeError(f"PassManager::run failed (planted) for {logits.dtype}")


@top_k_top_p_entry
def top_k_top_p_fails_float16(
    logits: torch.Tensor,
    k: torch.Tensor | None,
    p: torch.Tensor | None,
    generators: Generators = None,
    *,
    k_max: int | None = None,
) -> torch.Tensor:
    """The torch sampler, except that float16 logits raise (a kernel not built for a dtype)."""
    from kernelpolicy.kernels.torch_impl import top_k_top_p

    if logits.dtype == torch.float16:
        raise RuntimeError("no float16 kernel (planted)")
    return top_k_top_p(logits, k, p, generators, k_max=k_max)
