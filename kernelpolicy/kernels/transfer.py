"""Host-to-device copies of a call's small per-row tensors (top-k, top-p) that do not hold the
host up.

A copy from pageable host memory is never really asynchronous: the driver first stages the
bytes into pinned memory of its own, and the call returns only after that (on the lent H100
a call's two such copies took 25-37 us of host time each, before the sampler's first launch).
From pinned memory the copy is queued and the call returns at once. A host tensor is
therefore copied into a pinned buffer of torch's host cache first (a memcpy of a few
kilobytes); the cache hands a buffer out again only once the copy that read it has run, so a
host that runs calls ahead of the GPU never overwrites bytes still in flight.
"""

from __future__ import annotations

import torch


def to_device(
    t: torch.Tensor, device: torch.device, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``t`` on ``device`` in ``dtype`` (default: its own), copied without waiting for the stream.

    Args:
        t: A small tensor (per-row parameters), on the host or a device.
        device: Where the kernels read it.
        dtype: The dtype they read; converted on the side that holds ``t``.

    Returns:
        A tensor on ``device``; ``t`` itself when nothing had to change. The copy is ordered on
        the current stream, so kernels queued after it read the new values.
    """
    if dtype is not None and t.dtype != dtype and t.device.type == "cpu":
        t = t.to(dtype)  # on the host: a few hundred elements, before the transfer
    if t.device.type == "cpu" and device.type == "cuda":
        t = pinned(t)
    return t.to(device=device, dtype=dtype, non_blocking=True)


def copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Copy ``src`` into the device buffer ``dst`` (a graph's input), without waiting for the
    stream; a host ``src`` goes through pinned memory."""
    if src.device.type == "cpu" and dst.device.type == "cuda":
        src = pinned(src)
    dst.copy_(src, non_blocking=True)


def pinned(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` in pinned memory of torch's host cache, or ``t`` itself where pinning is
    not possible (no CUDA, or the host refuses page-locked memory): the transfer is then
    staged by the driver, slower but correct.

    A tensor the caller pinned itself is copied too: the transfer reads its source when the
    GPU gets to it, and a caller that refills its buffer for the next step before then (a
    host running ahead) would change what this call draws with.
    """
    try:
        return torch.empty_like(t, pin_memory=True).copy_(t)
    except RuntimeError:
        return t
