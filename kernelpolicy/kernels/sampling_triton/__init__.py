"""Sort-free top-k/top-p sampling in Triton: the ``triton`` implementation (CUDA).

Same signature and semantics as :func:`kernelpolicy.kernels.torch_impl.top_k_top_p`, built so
that the logits are read about twice and nothing is sorted at vocabulary size. Per call:

1. ``group_kernel`` (2-D grid): the maximum, the second maximum and the softmax sum of every
   group of ``GS`` logits.
2. ``bounds_kernel`` (per row, ``bounds.py``): a lower bound of the candidates, searched over
   the group values with no sort. Top-k: at or below the k-th largest group value, so that the
   exact top-k is among the logits ``>=`` it and fewer than ``(k - 1 + SLACK) * GS`` logits lie
   above it. Top-p: at or below the first group values whose own mass reaches ``p`` (each is a
   logit, so the nucleus lies above the last of them).
3. ``select_kernel`` (2-D grid): every logit ``>=`` the bound, packed with its token id into a
   64-bit key, goes to its tile's slots. Only the groups whose maximum reaches the bound are
   read (chunks of ``SELECT_CHUNK`` logits without one are skipped), a few percent of the row.
4. ``finish_kernel`` (per row): sorts the few candidates by key (logit, then lower token id),
   applies top-k, then top-p (over the row's whole softmax, or the top-k's own), and draws by
   inverse CDF with one uniform per row. A row with neither k nor p draws a group by its mass,
   then a token inside it.
5. The wide rows (only when some row may have p without k): the top-p rows step 4 could not
   finish (a nucleus wider than its candidate buffer) first propose ``PROPOSALS`` tokens from
   their whole softmax and keep the first inside the nucleus (``reject.py``, one read of the
   row, exact by rejection); the few with none inside narrow their boundary with histograms
   over (row, tile) grids and resolve it exactly (``wide.py``, three reads of the row).
6. ``row_kernel`` (per row, rows flagged by steps 4-5 only): top-k rows with many tied logits
   or candidates crowded into one tile, and top-p rows the wide kernels could not narrow (a
   tied group wider than their buffer). It searches the nucleus threshold exactly (``FAN``
   thresholds per pass over the row until the logits in the last interval fit a buffer), so no
   row is ever truncated to a fixed candidate count; it is the slow path (one SM reads the row
   several times).

Launched eagerly, that is five to twelve Triton launches and a few torch ops per call,
several hundred microseconds of Python; on CUDA the launches are captured into a CUDA graph per
call shape once it repeats and replayed after (``graphs``: which calls may, what a graph bakes
in, the bounded cache; ``choose``: the shapes and addresses seen, and which graph a call replays;
``replay``: a captured shape, whose group pass starts before the host's copies for large
logits). Calls with per-row generators run eagerly.

NaN logits are never drawn; ``+inf`` logits share all the mass; a row with nothing finite
gives token 0. Ties at the top-k boundary keep the lowest token ids. Seeded rows draw their
uniform from their own generator, so a seeded request gets the same token whatever else is in
the batch (not the same token as the torch implementation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
import triton

from kernelpolicy.kernels import transfer
from kernelpolicy.kernels.sampling_triton import choose, graphs, launch, replay

# The kernels, and the records of what failed at run time while the sampler kept serving
# (failures.py), live in this namespace: launch.py reads them from here at call time, where the
# tests and the compile check replace them.
from kernelpolicy.kernels.sampling_triton.bounds import bounds_kernel  # noqa: F401
from kernelpolicy.kernels.sampling_triton.common import group_kernel  # noqa: F401
from kernelpolicy.kernels.sampling_triton.failures import (  # noqa: F401
    CAPTURE_FAILED,
    DEGRADATIONS,
    REJECT_FAILED,
    UPCAST,
    WIDE_FAILED,
)
from kernelpolicy.kernels.sampling_triton.fast import finish_kernel, select_kernel  # noqa: F401
from kernelpolicy.kernels.sampling_triton.reject import (  # noqa: F401
    propose_kernel,
    reject_pick_kernel,
    reject_tile_kernel,
)
from kernelpolicy.kernels.sampling_triton.row import row_kernel  # noqa: F401
from kernelpolicy.kernels.sampling_triton.wide import (  # noqa: F401
    wide_compact_kernel,
    wide_draw_kernel,
    wide_narrow_kernel,
    wide_resolve_kernel,
    wide_tile_kernel,
)
from kernelpolicy.kernels.torch_impl import Generators

MAX_K = 256  # a larger k goes through the torch implementation
GROUP = 32  # logits per group, at most
GROUP_BLOCK, GROUP_WARPS = 4096, 8  # tile and warps of the 2-D kernels
# the group pass reduces each group once, to (maximum, second largest, largest finite)
# triples, instead of four reductions (common.group_kernel)
GROUP_ONE_REDUCE = True
# select_kernel: logits a chunk (a chunk without a group reaching the bound is skipped whole)
# and warps a program. On the H100 at batch 1024 (top-k), chunks of 128, 256, 512 and 1024
# took 107, 85, 76 and 85 us, the whole tile masked 179 us (8 warps) to 307 (2 warps)
SELECT_CHUNK, SELECT_WARPS = 512, 4
TOP_GROUPS = 512  # group values above a top-p bound beyond which the nucleus counts as wide
# the bound search (bounds.py): thresholds per pass, values per step, passes (16 of 4 are
# exact for any float32), and the group values it may leave above the exact bound. 4 a pass
# took 58-61 us at batch 1024 (top-k) and 42-90 us (top-p) on the H100, against 70-71 and
# 62-107 with 16 a pass (8 a pass: 65-68 and 52-98)
FAN_BOUND, CHUNK, PASSES, SLACK = 4, 256, 16, 16
REGION = 128  # candidates one tile may hand to finish_kernel
SMALL, LARGE = 256, 1024  # finish_kernel sorts SMALL keys, or LARGE; more go to row_kernel
CAP = 4096  # candidates row_kernel may hold (and sort)
ROW_BLOCK, ROW_WARPS = 2048, 8  # tile and warps of row_kernel
FAN = 16  # thresholds per pass of the exact nucleus search
ROUNDS = 12  # search passes before the interval is kept whole (only ties get there)
W_ROUNDS = 2  # narrowing rounds of the wide kernels (254 bins each)
# tile and sub-tile of the wide kernels: large tiles, since their grids launch for every row
# and all but the wide rows return at once
W_BLOCK, W_SUB, W_WARPS = 16384, 1024, 8  # sub-tiles of 1024: 2.24 ms against 2.66 ms (H100)
BOUNDS_WARPS = 4
# finish_kernel's warps, and when some row may be top-p without top-k (its candidates may need
# the LARGE sort): on the H100, 8 took 13-26 us at batch 256-1024 against 27-32 us with 4 for
# those; the other calls keep 4 (7 and 20 us, against 7.5 and 21.5 with 8)
FINISH_WARPS, FINISH_WARPS_P = 4, 8
PROPOSALS = 8  # proposals per wide row before the exact wide kernels (reject.py); 0: none
# proposals checked by the first pass of the proposals' check (a row keeps the first with
# probability p), then per later pass (powers of two). On the H100 (wide nucleus, p 0.9) 2
# first, then the other 6, took 199 and 598 us a call back to back at batch 256 and 1024,
# against 209 and 659 with 4 and 4
REJECT_FIRST, REJECT_STEP = 2, 8
# group masses per step, and warps, of the proposals' draw (one pass for all of a row's): on
# the H100 (wide nucleus) 15 us at batch 256 and 45 at 1024, against 21 and 53 with 512 and 4
PROPOSE_BLOCK, PROPOSE_WARPS = 1024, 8
# warps of the proposals' check: on the H100 4 took 287 us a call at batch 1024 (wide
# nucleus), 8 (the 2-D kernels' GROUP_WARPS) 366 us
REJECT_WARPS = 4
# logits from this size on replay the group pass as a graph of its own, before the host copies
# k and p and draws the uniforms (replay.py); smaller ones keep one graph, whose single launch
# costs the host less than the group pass would hide
GROUPS_FIRST_BYTES = 32 << 20
# a graph that reads logits in place reads k and p there too when they are on the GPU
# (graphs.params_in_place); a host k or p equal to the one copied last is not copied again
# (replay.py). Each saves the host a copy per call before the kernels after the group pass
PARAMS_IN_PLACE, SKIP_UNCHANGED = True, True
# graphs reading logits of at most graphs.COPY_BYTES in place, per call shape: a serving loop
# or a benchmark reuses a few addresses (bench_samplers.py three); each saves the copy into a
# graph's buffer (about 11 us for 16 MB on an H100). Past it, new addresses are copied (0: always)
IN_PLACE_CAPTURES = 4


def _uniform(batch: int, device: torch.device, generators: Generators) -> torch.Tensor:
    u = torch.rand(batch, device=device)
    for row, generator in (generators or {}).items():
        u[row : row + 1].uniform_(generator=generator)
    return u


def _proposal_uniforms(batch: int, device: torch.device, generators: Generators) -> torch.Tensor:
    """``[batch, PROPOSALS]`` uniforms for the wide rows' proposals (seeded rows from their own
    generator, after their main uniform)."""
    q = torch.rand(batch, PROPOSALS, device=device)
    for row, generator in (generators or {}).items():
        q[row].uniform_(generator=generator)
    return q


def _graph_uniforms(uq: torch.Tensor) -> None:
    """Fill a graph's uniforms (each row's draw, then the wide rows' proposals) in one launch,
    before its replay: a graph that holds torch's random-number kernels makes each replay
    launch two more kernels to advance the generator's seed and offset."""
    uq.uniform_()


def _group_size(vocab: int, k_bound: int) -> int:
    """The largest power of two <= GROUP that leaves at least k_bound groups and room for the
    (k_bound - 1 + SLACK) * size + k_bound candidates of a top-k row (bounds.py)."""
    size = GROUP
    while size > 1 and (
        -(-vocab // size) < k_bound or (k_bound - 1 + SLACK) * size + k_bound > CAP
    ):
        size //= 2
    return size


def _k_bound(k: torch.Tensor, vocab: int, k_max: int | None) -> tuple[int, bool]:
    """An upper bound of the rows' top-k (0: no row has one), and whether every row has one.

    A row's ``k`` outside ``(0, vocab)`` means "no top-k"; the kernels read it so themselves,
    so ``k`` goes to them as the caller passed it. On the host this costs one reduction; on the
    GPU without ``k_max`` it reads ``k`` with a device synchronisation.
    """
    if k.device.type != "cpu" and k_max is not None:
        return max(min(int(k_max), vocab - 1), 0), False
    if not k.numel():
        return 0, False
    low, high = (int(v) for v in torch.aminmax(k))
    every_row = low > 0 and high < vocab
    if high >= vocab:  # vLLM passes k = vocab for the rows without top-k
        high = int(torch.where(k < vocab, k, 0).max())
    return max(high, 0), every_row


def _stream_id(device: torch.device) -> int:
    """The current stream's handle (0 off CUDA), without building a Stream object per call."""
    if device.type != "cuda":
        return 0
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(device.index))
    return int(torch.cuda.current_stream(device).cuda_stream)


class _Scratch:
    """Per-call work buffers, kept per (device, stream, batch, vocab, group size): calls on
    one stream run in order, so reusing them is safe, and it saves a dozen allocations."""

    _cache: ClassVar[dict[tuple[object, ...], _Scratch]] = {}

    def __init__(self, batch: int, vocab: int, size: int, device: torch.device) -> None:
        self.tiles = triton.cdiv(vocab, GROUP_BLOCK)
        self.groups = self.tiles * (GROUP_BLOCK // size)
        f32, i32, i64 = torch.float32, torch.int32, torch.int64
        # the group maxima, then the second maxima; gsum shares the row stride
        self.gmax = torch.empty(batch, 2 * self.groups, dtype=f32, device=device)
        self.gsum = torch.empty(batch, 2 * self.groups, dtype=f32, device=device)
        self.bound = torch.empty(batch, dtype=f32, device=device)
        self.m = torch.empty(batch, dtype=f32, device=device)  # the row maxima
        self.z = torch.empty(batch, dtype=f32, device=device)
        self.mode = torch.empty(batch, dtype=i32, device=device)
        self.slow = torch.empty(batch, dtype=i32, device=device)
        self.counts = torch.empty(batch, self.tiles, dtype=i32, device=device)
        self.regions = torch.empty(batch, self.tiles, REGION, dtype=i64, device=device)
        self.dense = torch.empty(batch, LARGE, dtype=i64, device=device)
        self.buffers = torch.empty(batch, CAP, dtype=i64, device=device)
        # the wide kernels: per row, each round's interval and chosen bins, the count inside,
        # a counter, the boundary and its kept ties; per tile, histograms and masses
        self.states = torch.empty(batch, 4 * W_ROUNDS, dtype=f32, device=device)
        self.thr = torch.empty(batch, dtype=f32, device=device)
        self.n_in, self.wide_n, self.ties = (
            torch.empty(batch, dtype=i32, device=device) for _ in range(3)
        )
        self.w_tiles = triton.cdiv(vocab, W_BLOCK)
        self.hists = torch.empty(batch, self.w_tiles, 256, dtype=i32, device=device)
        self.part_above, self.tile_mass = (
            torch.empty(batch, self.w_tiles, dtype=f32, device=device) for _ in range(2)
        )
        self.tile_eq = torch.empty(batch, self.w_tiles, dtype=i32, device=device)
        # the proposals of the wide rows, and the mass before each, per tile
        self.proposals = torch.empty(batch, max(PROPOSALS, 1), dtype=i32, device=device)
        self.before = torch.empty(batch, self.tiles, max(PROPOSALS, 1), dtype=f32, device=device)

    @classmethod
    def get(cls, batch: int, vocab: int, size: int, device: torch.device) -> _Scratch:
        key = (device, _stream_id(device), batch, vocab, size, PROPOSALS)
        scratch = cls._cache.get(key)
        if scratch is None:
            if len(cls._cache) >= 16:  # a serving process sees few shapes; bound it anyway
                cls._cache.clear()
            scratch = cls._cache[key] = cls(batch, vocab, size, device)
        return scratch


def top_k_top_p(
    logits: torch.Tensor,
    k: torch.Tensor | None,
    p: torch.Tensor | None,
    generators: Generators = None,
    *,
    k_max: int | None = None,
) -> torch.Tensor:
    """Sample one token per row after top-k and then top-p filtering (see the module doc).

    ``k`` on the host costs nothing; on the GPU, pass ``k_max`` or its maximum is read with a
    device synchronisation. Rows whose ``k`` is ``<= 0`` or ``>= vocab`` are top-p (or plain)
    rows. A ``k`` above :data:`MAX_K` goes through the torch implementation.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be [batch, vocab], got shape {tuple(logits.shape)}")
    batch, vocab = logits.shape
    k, p = _per_row(k, "k", batch), _per_row(p, "p", batch)
    k_bound, every_row_k = (0, False) if k is None else _k_bound(k, vocab, k_max)
    if k_bound > MAX_K:
        from kernelpolicy.kernels import torch_impl

        return torch_impl.top_k_top_p(logits, k, p, generators, k_max=k_max)
    k_rows = k if k_bound > 0 else None
    # a row with p and no k may need the wide kernels
    rows = (k_rows is not None, p is not None, p is not None and not every_row_k)
    x = logits.float() if logits.dtype in UPCAST else logits
    try:
        return _pipeline(x, k_rows, k_bound, p, generators, rows)
    except Exception as exc:  # the kernels do not build for this dtype here: read it as float32
        if x.dtype == torch.float32:
            raise
        UPCAST[x.dtype] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return _pipeline(x.float(), k_rows, k_bound, p, generators, rows)


def _per_row(t: torch.Tensor | None, name: str, batch: int) -> torch.Tensor | None:
    """``t`` with one value a row: one value for all is broadcast (as the torch implementation
    does); the kernels read ``t[row]``, so any other shape is refused, not read past its end."""
    if t is None or tuple(t.shape) == (batch,):
        return t
    if t.numel() == 1:
        return t.reshape(1).expand(batch)
    raise ValueError(
        f"{name} must hold one value per row ([{batch}]) or one for all, got shape {tuple(t.shape)}"
    )


Capture = Callable[
    [Callable[[torch.Tensor], None], torch.Tensor, torch.device], Callable[..., None]
]
CAPTURE: Capture = graphs.capture_cuda
"""Captures a launch into a graph and returns its replay (a fake stands in on CPU tests)."""
GRAPHS: graphs.GraphCache[replay.Graph] = graphs.GraphCache()


def _pipeline(
    x: torch.Tensor,
    k_rows: torch.Tensor | None,
    k_bound: int,
    p: torch.Tensor | None,
    generators: Generators,
    rows: tuple[bool, bool, bool],
) -> torch.Tensor:
    """One call: replayed from a CUDA graph where ``graphs.plan`` allows it, else eager.
    ``rows``: some row has k, some row has p, some row may have p without k."""
    batch, vocab = x.shape
    size = _group_size(vocab, k_bound)
    k_dtype = None if k_rows is None else k_rows.dtype
    nbytes = x.numel() * x.element_size()
    groups_first = nbytes >= GROUPS_FIRST_BYTES
    shape: tuple[object, ...] = (x.device, _stream_id(x.device), batch, vocab, x.dtype, size)
    shape = (*shape, k_dtype, *rows, groups_first)
    with GRAPHS.lock:
        mode, key, where, params = choose.plan(shape, x, k_rows, p, bool(generators))
        if mode is not graphs.Mode.EAGER and GRAPHS.failure(key) is None:
            graph = GRAPHS.get(key)
            replacing = graph is not None and not graphs.serves(graph.params, where)
            if replacing:
                graph, params = None, (0, 0)  # k or p moved: a graph that copies them takes over
            if graph is not None:
                return graph.run(x, k_rows, p)
            small = nbytes <= graphs.COPY_BYTES
            if mode is graphs.Mode.IN_PLACE and small and not replacing:
                GRAPHS.captured_in_place(shape)
            graph = replay.Graph(x, k_rows, size, rows, mode, groups_first, params)
            return graph.first_run(key, x, k_rows, p)
    return _eager(x, k_rows, size, p, generators, rows[2])


def _eager(
    x: torch.Tensor,
    k_rows: torch.Tensor | None,
    size: int,
    p: torch.Tensor | None,
    generators: Generators,
    p_rows: bool,
) -> torch.Tensor:
    x = x if x.stride(-1) == 1 else x.contiguous()
    batch, vocab = x.shape
    device = x.device
    w = _Scratch.get(batch, vocab, size, device)
    launch.groups_pass(x, w, size)  # first: it needs neither k, p nor the uniforms
    u = _uniform(batch, device, generators)
    q = _proposal_uniforms(batch, device, generators) if p_rows and PROPOSALS else u
    # non-blocking: a blocking host-to-device copy waits for the whole stream
    k_dev = u if k_rows is None else transfer.to_device(k_rows, device).contiguous()
    p_dev = u if p is None else transfer.to_device(p, device, torch.float32).contiguous()
    out = torch.empty(batch, dtype=torch.int64, device=device)
    flags = (k_rows is not None, p is not None, p_rows)
    launch.after_groups(x, w, size, k_dev, p_dev, (u, q), out, flags)
    return out


_launch = launch.launch  # the compile check and the tests call it here
