"""What failed at run time while the Triton sampler kept serving, correctly but slower: one
record per way it degrades, each a dictionary dtype -> why that the sampler reads on its hot
path. A Resolution that loads a sampler reports every entry in ``runtime_fallbacks``, the
decision's warnings and ``explain`` (:mod:`kernelpolicy.kernels.degraded`).
"""

from __future__ import annotations

import torch

from kernelpolicy.kernels.degraded import Degradations, Degraded


class Failures:
    """One sampler's records, on one channel (``degradations``) a Resolution listens to."""

    def __init__(self) -> None:
        self.degradations = Degradations()
        channel = self.degradations
        self.wide_failed: Degraded[torch.dtype] = channel.record(
            "the wide-nucleus kernels failed to build for {key}",
            "wide top-p rows of {key} logits go to the exact per-row kernel",
        )
        """dtypes whose wide kernels failed to build in this process (-> why): their wide rows
        go to row_kernel, exact but slower, instead of failing the call."""
        self.reject_failed: Degraded[torch.dtype] = channel.record(
            "the proposal kernels failed to build for {key}",
            "wide top-p rows of {key} logits go straight to the exact wide kernels",
        )
        """dtypes whose proposal kernels (reject.py) failed to build (-> why): their wide rows
        go straight to the exact wide kernels."""
        self.upcast: Degraded[torch.dtype] = channel.record(
            "the kernels failed to compile for {key}",
            "{key} logits are converted to float32 first, one more pass over them",
        )
        """dtypes whose kernels failed to compile (-> why): their logits are converted to
        float32 before the kernels (one more pass over the logits), instead of failing."""
        self.capture_failed: Degraded[torch.dtype] = channel.record(
            "CUDA-graph capture failed for a {key} call shape",
            "a {key} call shape whose capture fails launches eagerly, with the host time of "
            "each launch",
        )
        """dtypes with a call shape whose CUDA-graph capture failed (-> the first such shape
        and why); the sampler's graph cache keeps every failed shape, which runs eagerly."""


PROCESS = Failures()
"""The default sampler's records (``sampling_triton.DEFAULT``)."""
DEGRADATIONS = PROCESS.degradations
WIDE_FAILED = PROCESS.wide_failed
REJECT_FAILED = PROCESS.reject_failed
UPCAST = PROCESS.upcast
CAPTURE_FAILED = PROCESS.capture_failed
