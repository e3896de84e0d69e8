"""One captured call shape of the sampler: the buffers its graph reads and writes, its first
(eager) run and capture, and its replays. Which calls may use a graph, and the cache of them,
are in ``graphs.py``.

A replay has host work before the kernels can start: the copies of k and p into the graph's
buffers and the draw of the uniforms. For large logits the group pass (step 1 of the package
doc, the one full read) is captured as a graph of its own and replayed first, since it reads
none of them: the host does that work while the GPU reads the logits, instead of before.

A graph belongs to one sampler (``parts.GraphHost``): its capture, graph cache, uniforms' draw
and tuning are the sampler's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from kernelpolicy.kernels import transfer
from kernelpolicy.kernels.sampling_triton import graphs, launch
from kernelpolicy.kernels.sampling_triton.scratch import Scratch

if TYPE_CHECKING:
    from kernelpolicy.kernels.sampling_triton.parts import GraphHost


def _drop(device: torch.device, graphs: list[Graph | None]) -> None:
    """Release graphs taken out of the cache once the GPU has finished them: a replay of one
    may still be running, reading its buffers and, in place, the caller's k and p."""
    if any(g is not None for g in graphs) and device.type == "cuda":
        torch.cuda.synchronize(device)
    graphs.clear()


class Graph:
    """The buffers one captured call shape reads and writes, and its replays. ``COPY`` graphs
    own their input buffer; ``IN_PLACE`` graphs read the caller's logits at the captured
    address (never kept here, so the caller's logits are not held; k and p read in place are
    held from the last call to the next)."""

    def __init__(
        self,
        s: GraphHost,
        x: torch.Tensor,
        k: torch.Tensor | None,
        size: int,
        flags: tuple[bool, bool, bool],
        mode: graphs.Mode,
        groups_first: bool,
        params: tuple[int, int] = (0, 0),
    ) -> None:
        batch, vocab = x.shape
        device = x.device
        self.s = s
        self.size = size
        self.has_k, self.has_p, self.p_rows = flags  # see launch.Flags
        self.w = Scratch(batch, vocab, size, device, s.tuning)
        copy = mode is graphs.Mode.COPY
        self.x = torch.empty(batch, vocab, dtype=x.dtype, device=device) if copy else None
        # the group pass as a graph of its own, replayed before the host's copies and draws
        self.groups_first = groups_first
        # k in the caller's dtype: the copy is then a plain transfer, no conversion kernel
        k_dtype = torch.int32 if k is None else k.dtype
        self.k = torch.zeros(batch, dtype=k_dtype, device=device)
        self.p = torch.ones(batch, dtype=torch.float32, device=device)
        # k and p read where the caller keeps them (their addresses are in the key: see
        # graphs.params_in_place), else copied; a host copy is skipped while its values are
        # those copied last (a serving loop's parameters change only with its batch)
        self.params = params  # k's and p's addresses where read in place, else 0
        self.copied: dict[str, torch.Tensor] = {}
        # the draw's uniforms, then the proposals' (wide rows only), in one buffer filled by
        # the sampler's draws.graph before each replay, outside the graph
        proposals = s.tuning.proposals if self.p_rows else 0
        self.uq = torch.empty(batch * (1 + proposals), dtype=torch.float32, device=device)
        self.u = self.uq[:batch]
        self.q = self.uq[batch:].view(batch, proposals) if proposals else self.u
        self.out = torch.empty(batch, dtype=torch.int64, device=device)
        self.replays: list[Callable[..., None]] = []  # [groups pass,] the rest

    def load_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Copy the logits into the graph's own buffer (``COPY``); returns what it reads."""
        if self.x is not None:
            self.x.copy_(x)
            return self.x
        return x

    def load_rest(self, k_rows: torch.Tensor | None, p: torch.Tensor | None) -> None:
        """Copy k and p into the graph's buffers (or take the caller's, read in place) and
        draw the uniforms."""
        if self.has_k and k_rows is not None:
            if self.params[0]:
                self.k = k_rows  # at the captured address (the key holds it)
            else:
                self._copy("k", self.k, k_rows)
        if self.has_p and p is not None:
            if self.params[1]:
                self.p = p
            else:
                self._copy("p", self.p, p)
        self.s.draws.graph(self.uq)

    def _copy(self, name: str, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Copy without waiting for the stream (a blocking copy would sync the host); a host
        ``src`` equal to the one copied last is not copied again."""
        if src.device.type == "cpu" and self.s.tuning.skip_unchanged:
            last = self.copied.get(name)
            if last is not None and last.dtype == src.dtype and torch.equal(last, src):
                return
            self.copied[name] = src.clone()
        transfer.copy_into(dst, src)

    def groups_pass(self, x: torch.Tensor) -> None:
        launch.groups_pass(self.s, x, self.w, self.size)

    def after_groups(self, x: torch.Tensor) -> None:
        """Every kernel after the group pass (captured): the uniforms are drawn before."""
        k_dev = self.k if self.has_k else self.u
        p_dev = self.p if self.has_p else self.u
        flags = (self.has_k, self.has_p, self.p_rows)
        uniforms = (self.u, self.q)
        launch.after_groups(self.s, x, self.w, self.size, k_dev, p_dev, uniforms, self.out, flags)

    def launch(self, x: torch.Tensor) -> None:
        """The whole call's kernels, as one graph."""
        self.groups_pass(x)
        self.after_groups(x)

    def parts(self) -> list[Callable[[torch.Tensor], None]]:
        """What is captured, in replay order: the group pass, then the rest; or all in one."""
        return [self.groups_pass, self.after_groups] if self.groups_first else [self.launch]

    def first_run(
        self,
        key: tuple[object, ...],
        x: torch.Tensor,
        k_rows: torch.Tensor | None,
        p: torch.Tensor | None,
    ) -> torch.Tensor:
        """Run the call shape eagerly on the graph's own buffers (Triton compiles what it
        needs), then capture it; a failed capture makes the shape eager from then on."""
        s = self.s
        source = self.load_logits(x)
        self.load_rest(k_rows, p)
        self.launch(source)
        result = self.out.clone()
        try:
            self.replays = [s.capture(part, source, x.device) for part in self.parts()]
        except Exception as exc:  # a capture failure costs this shape its graph, nothing else
            why = f"{type(exc).__name__}: {str(exc)[:300]}"
            _drop(x.device, [s.graphs.fail(key, why)])
            failed = s.failures.capture_failed
            if x.dtype not in failed:  # said once per dtype: shapes are unbounded
                failed[x.dtype] = f"batch {x.shape[0]}, vocab {x.shape[1]}: {why}"
            return result
        _drop(x.device, [*s.graphs.put(key, self)])
        return result

    def run(
        self, x: torch.Tensor, k_rows: torch.Tensor | None, p: torch.Tensor | None
    ) -> torch.Tensor:
        """One replay: the group pass first where it is a graph of its own (the host's copies
        and draw then overlap it), else the copies and draw, then the whole graph."""
        source = self.load_logits(x)
        *first, rest = self.replays
        for replay in first:
            replay(source)
        self.load_rest(k_rows, p)
        rest(source)
        return self.out.clone()  # the next replay overwrites out
