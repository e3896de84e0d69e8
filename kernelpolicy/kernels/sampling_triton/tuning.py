"""The Triton sampler's tuning: tile sizes, buffer sizes, warps and switches, as one frozen
value. They are chosen by the host (most are ``tl.constexpr`` arguments of the kernels), so a
:class:`~kernelpolicy.kernels.sampling_triton.sampler.Sampler` built with another ``Tuning``
launches the same kernels at other sizes: the tests shrink the tiles so that Triton's
interpreter stays cheap, and ``scripts/gpu_profile_samplers.py --set/--versus`` times
alternatives side by side. The figures in the comments are the H100 measurements that chose
the defaults.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Tuning:
    """The sampler's constants (see the package doc for the steps they size)."""

    max_k: int = 256
    """A larger k goes through the torch implementation."""
    group: int = 32
    """Logits per group, at most."""
    group_block: int = 4096
    """Tile of the 2-D kernels."""
    group_warps: int = 8
    """Warps of the 2-D kernels."""
    group_one_reduce: bool = True
    """The group pass reduces each group once, to (maximum, second largest, largest finite)
    triples, instead of four reductions (``common.group_kernel``)."""
    select_chunk: int = 512
    """select_kernel's chunk (a chunk without a group reaching the bound is skipped whole). On
    the H100 at batch 1024 (top-k), chunks of 128, 256, 512 and 1024 took 107, 85, 76 and
    85 us, the whole tile masked 179 us (8 warps) to 307 (2 warps)."""
    select_warps: int = 4
    top_groups: int = 512
    """Group values above a top-p bound beyond which the nucleus counts as wide."""
    fan_bound: int = 4
    """Thresholds per pass of the bound search (bounds.py). 4 a pass took 58-61 us at batch
    1024 (top-k) and 42-90 us (top-p) on the H100, against 70-71 and 62-107 with 16 a pass
    (8 a pass: 65-68 and 52-98)."""
    chunk: int = 256
    """Group values per step of the bound search."""
    passes: int = 16
    """Passes of the bound search (16 of 4 thresholds are exact for any float32)."""
    slack: int = 16
    """Group values the bound search may leave above the exact bound."""
    region: int = 128
    """Candidates one tile may hand to finish_kernel."""
    small: int = 256
    """finish_kernel sorts ``small`` keys, or ``large``; more go to row_kernel."""
    large: int = 1024
    cap: int = 4096
    """Candidates row_kernel may hold (and sort)."""
    row_block: int = 2048
    """Tile of row_kernel."""
    row_warps: int = 8
    fan: int = 16
    """Thresholds per pass of the exact nucleus search."""
    rounds: int = 12
    """Search passes before the interval is kept whole (only ties get there)."""
    w_rounds: int = 2
    """Narrowing rounds of the wide kernels (254 bins each)."""
    w_block: int = 16384
    """Tile of the wide kernels: large, since their grids launch for every row and all but the
    wide rows return at once."""
    w_sub: int = 1024
    """Sub-tile of the wide kernels: 1024 took 2.24 ms against 2.66 ms (H100)."""
    w_warps: int = 8
    bounds_warps: int = 4
    finish_warps: int = 4
    """finish_kernel's warps; the calls where no row may be top-p without top-k keep 4 (7 and
    20 us at batch 256-1024 on the H100, against 7.5 and 21.5 with 8)."""
    finish_warps_p: int = 8
    """finish_kernel's warps when some row may be top-p without top-k (its candidates may need
    the ``large`` sort): 8 took 13-26 us against 27-32 us with 4."""
    proposals: int = 8
    """Proposals per wide row before the exact wide kernels (reject.py); 0: none."""
    reject_first: int = 2
    """Proposals checked by the first pass of the proposals' check (a row keeps the first with
    probability p). On the H100 (wide nucleus, p 0.9) 2 first, then the other 6, took 199 and
    598 us a call back to back at batch 256 and 1024, against 209 and 659 with 4 and 4."""
    reject_step: int = 8
    """Proposals per later pass of the check (a power of two)."""
    propose_block: int = 1024
    """Group masses per step of the proposals' draw: on the H100 (wide nucleus) 15 us at batch
    256 and 45 at 1024, against 21 and 53 with 512 and 4 warps."""
    propose_warps: int = 8
    reject_warps: int = 4
    """Warps of the proposals' check: 4 took 287 us a call at batch 1024 (wide nucleus) on the
    H100, 8 (the 2-D kernels' ``group_warps``) 366 us."""
    groups_first_bytes: int = 32 << 20
    """Logits from this size on replay the group pass as a graph of its own, before the host
    copies k and p and draws the uniforms (replay.py); smaller ones keep one graph, whose single
    launch costs the host less than the group pass would hide."""
    params_in_place: bool = True
    """A graph that reads logits in place reads k and p there too when they are on the GPU
    (``graphs.params_in_place``): it saves the host a copy per call."""
    skip_unchanged: bool = True
    """A host k or p equal to the one copied last is not copied again (replay.py)."""
    in_place_captures: int = 4
    """Graphs reading logits of at most ``graphs.COPY_BYTES`` in place, per call shape: a
    serving loop or a benchmark reuses a few addresses (bench_samplers.py three); each saves the
    copy into a graph's buffer (about 11 us for 16 MB on an H100). Past it, new addresses are
    copied (0: always)."""

    def replace(self, **changes: int | bool) -> Tuning:
        """A copy with ``changes`` (field names as above).

        Raises:
            TypeError: a name that is not a field.
        """
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def field_names() -> list[str]:
    """Every tuning constant's name, in declaration order."""
    return [field.name for field in dataclasses.fields(Tuning)]
