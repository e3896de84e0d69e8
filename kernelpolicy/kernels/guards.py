"""Output guards for kernels with a known output bug, applied on the device.

``clamp_token_ids``: the aiter greedy kernel can return ``vocab_size`` for an all-NaN or all -inf
row (SGLang's SGLANG_DISABLE_AITER_GREEDY_SAMPLE report). Ids outside ``[0, vocab)`` are replaced
by 0, which is what ``torch.argmax`` gives such a row, with ``torch.where`` (no host
synchronisation), and the repaired rows are counted in a device tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class ClampTokenIds:
    """Wrap a sampler so that every id it returns lies in ``[0, vocab)``.

    Attributes:
        repaired: A 0-d int64 tensor on the kernel's device counting repaired rows; read it with
            ``int(guard.repaired)`` when a host synchronisation is acceptable.
    """

    name = "clamp_token_ids"

    def __init__(self, kernel: Callable[..., torch.Tensor]) -> None:
        self.kernel = kernel
        self.repaired = torch.zeros((), dtype=torch.int64)

    def __call__(self, logits: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        ids = self.kernel(logits, *args, **kwargs)
        bad = (ids < 0) | (ids >= logits.shape[-1])
        if self.repaired.device != bad.device:
            self.repaired = self.repaired.to(bad.device)
        self.repaired += bad.sum()
        return torch.where(bad, torch.zeros_like(ids), ids)

    def __repr__(self) -> str:
        return f"ClampTokenIds({getattr(self.kernel, '__qualname__', self.kernel)!r})"


GUARDS: dict[str, type[ClampTokenIds]] = {ClampTokenIds.name: ClampTokenIds}
