"""Per-call work buffers of the sampler's kernels, sized by its :class:`Tuning`."""

from __future__ import annotations

import torch
import triton

from kernelpolicy.kernels.sampling_triton.tuning import Tuning

SCRATCH_ENTRIES = 16  # a serving process sees few shapes; bounded anyway


def stream_id(device: torch.device) -> int:
    """The current stream's handle (0 off CUDA), without building a Stream object per call."""
    if device.type != "cuda":
        return 0
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(device.index))
    return int(torch.cuda.current_stream(device).cuda_stream)


class Scratch:
    """The work buffers of one call shape (batch, vocab, group size)."""

    def __init__(
        self, batch: int, vocab: int, size: int, device: torch.device, tuning: Tuning
    ) -> None:
        t = tuning
        self.tiles = triton.cdiv(vocab, t.group_block)
        self.groups = self.tiles * (t.group_block // size)
        f32, i32, i64 = torch.float32, torch.int32, torch.int64

        def empty(*shape: int, dtype: torch.dtype = f32) -> torch.Tensor:
            return torch.empty(*shape, dtype=dtype, device=device)

        # the group maxima, then the second maxima; gsum shares the row stride
        self.gmax, self.gsum = empty(batch, 2 * self.groups), empty(batch, 2 * self.groups)
        self.bound, self.m, self.z = empty(batch), empty(batch), empty(batch)  # m: row maxima
        self.mode, self.slow = empty(batch, dtype=i32), empty(batch, dtype=i32)
        self.counts = empty(batch, self.tiles, dtype=i32)
        self.regions = empty(batch, self.tiles, t.region, dtype=i64)
        self.dense = empty(batch, t.large, dtype=i64)
        self.buffers = empty(batch, t.cap, dtype=i64)
        # the wide kernels: per row, each round's interval and chosen bins, the count inside,
        # a counter, the boundary and its kept ties; per tile, histograms and masses
        self.states, self.thr = empty(batch, 4 * t.w_rounds), empty(batch)
        self.n_in, self.wide_n, self.ties = (empty(batch, dtype=i32) for _ in range(3))
        self.w_tiles = triton.cdiv(vocab, t.w_block)
        self.hists = empty(batch, self.w_tiles, 256, dtype=i32)
        self.part_above, self.tile_mass = empty(batch, self.w_tiles), empty(batch, self.w_tiles)
        self.tile_eq = empty(batch, self.w_tiles, dtype=i32)
        # the proposals of the wide rows, and the mass before each, per tile
        proposals = max(t.proposals, 1)
        self.proposals = empty(batch, proposals, dtype=i32)
        self.before = empty(batch, self.tiles, proposals)


class ScratchCache:
    """Work buffers per (device, stream, batch, vocab, group size): calls on one stream run in
    order, so reusing them is safe, and it saves a dozen allocations a call."""

    def __init__(self, tuning: Tuning) -> None:
        self.tuning = tuning
        self._cache: dict[tuple[object, ...], Scratch] = {}

    def get(self, batch: int, vocab: int, size: int, device: torch.device) -> Scratch:
        key = (device, stream_id(device), batch, vocab, size)
        scratch = self._cache.get(key)
        if scratch is None:
            if len(self._cache) >= SCRATCH_ENTRIES:
                self._cache.clear()
            scratch = self._cache[key] = Scratch(batch, vocab, size, device, self.tuning)
        return scratch

    def clear(self) -> None:
        self._cache.clear()
