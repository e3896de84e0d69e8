"""CUDA graphs of the sampler's launches: which calls may use one, the bounded cache of captured
graphs, and the capture itself.

One eager call launches five Triton kernels and a few torch ops, several hundred microseconds of
Python; a replayed graph launches them all in one call. A graph bakes in every pointer and shape
it was captured with, so a call replays one only when everything baked in matches (the key):

* ``IN_PLACE``: dense logits are read where they are, by a graph keyed by their address too,
  once that address has been seen :data:`POINTER_SIGHTINGS` times (serving loops and
  benchmarks reuse a few addresses). Such a graph reads k and p in place too where they are on
  the logits' device (:func:`params_in_place`; vLLM keeps them in persistent buffers) and their
  addresses repeat with the logits'; else it copies them.
* ``COPY``: logits of at most :data:`COPY_BYTES` not (yet) read in place are copied into the
  graph's own input buffer (strided or read-as-float32 logits need that pass anyway), so one
  graph serves every call of that shape whatever the caller's tensor, once the shape has been
  seen :data:`POINTER_SIGHTINGS` times: a batch size seen once (a serving loop's batch drifts)
  runs eagerly instead of paying a capture, and a steady one captures once, in place where its
  address repeated, else copying. The copy is what an in-place graph saves (about 11 us for
  16 MB on an H100). A shape of such logits captures a bounded number of in-place graphs (the
  package's ``IN_PLACE_CAPTURES``); past that, new addresses take its copying graph, so a
  caller whose addresses cycle costs a few captures, never one per call. Larger logits not yet
  read in place run eagerly: copying them would cost more than the launches a graph saves.
* ``EAGER``: not CUDA, Triton's interpreter, a stream that is itself being captured (the
  launches then become part of the caller's graph), per-row generators (their draws are not
  reproducible through a graph: those calls run eagerly, as documented), or more than
  :data:`GRAPH_MAX_ROWS` rows (each graph owns its work buffers).

The cache holds :data:`GRAPH_ENTRIES` graphs (least recently used first out). A key whose
capture failed runs eagerly from then on (small logits at an address whose in-place capture
failed take their shape's copying graph instead); the capture runs on a side stream, so a
failure never leaves the caller's stream capturing.
"""

from __future__ import annotations

import enum
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import torch

GRAPH_ENTRIES = 16  # captured graphs kept; a serving process sees a few shapes
FAILED_ENTRIES = 64  # keys (shapes, addresses) remembered as "capture failed"
SEEN_ENTRIES = 256  # call shapes and logits addresses counted towards POINTER_SIGHTINGS
IN_PLACE_SHAPES = 256  # call shapes whose in-place captures of small logits are counted
POINTER_SIGHTINGS = 2  # calls at one address (or of one small shape) before a capture
COPY_BYTES = 32 << 20  # logits up to this size are copied into a graph's buffer until read in place
# rows above which calls run eagerly: each graph owns its work buffers (32 KiB a row for the
# per-row kernel alone), so a few graphs of huge batches (the verify suite's 50,000 rows)
# would hold gigabytes; serving batches are far smaller
GRAPH_MAX_ROWS = 4096

T = TypeVar("T")


class Mode(enum.Enum):
    EAGER = "eager"
    COPY = "copy"
    IN_PLACE = "in_place"


def plan(
    *,
    device_type: str,
    interpreted: bool,
    capturing: bool,
    seeded: bool,
    rows: int,
    nbytes: int,
    dense: bool,
    sightings: int,
    shape_sightings: int,
) -> Mode:
    """How one call runs (see the module doc).

    Args:
        device_type: the logits' device type.
        interpreted: Triton's interpreter runs the kernels (``TRITON_INTERPRET=1``).
        capturing: the current stream is being captured by the caller.
        seeded: some rows draw from their own generator.
        rows: the batch size.
        nbytes: the size of the logits as the kernels read them.
        dense: the kernels can read the caller's tensor as it is (unit stride, no conversion).
        sightings: calls seen at this address with this shape, this one included (0: not
            to be read in place: see ``choose.plan``).
        shape_sightings: calls seen of this shape, this one included (counted for logits of
            at most :data:`COPY_BYTES`; 0 otherwise).

    Returns:
        The mode.
    """
    if device_type != "cuda" or interpreted or capturing or seeded or rows > GRAPH_MAX_ROWS:
        return Mode.EAGER
    if dense and sightings >= POINTER_SIGHTINGS:
        return Mode.IN_PLACE
    if nbytes <= COPY_BYTES and shape_sightings >= POINTER_SIGHTINGS:
        return Mode.COPY
    return Mode.EAGER


def params_in_place(
    x: torch.Tensor,
    k: tuple[torch.Tensor | None, torch.dtype | None],
    p: tuple[torch.Tensor | None, torch.dtype | None],
) -> tuple[int, int]:
    """The address of each per-row parameter (k, p) that an ``IN_PLACE`` graph may read where
    the caller keeps it, 0 for one it copies (absent, on another device, not one element a row
    at unit stride, or not in the dtype the kernels read; ``None``: any).

    Args:
        x: the logits.
        k: the top-k tensor, with the dtype the kernels read it in.
        p: the same for top-p.

    Returns:
        k's address (or 0) and p's; the graph's key holds them.
    """
    addresses = []
    for t, dtype in (k, p):
        usable = (
            t is not None
            and t.device == x.device
            and t.shape == x.shape[:1]
            and (t.stride(0) == 1 or t.numel() <= 1)
            and (dtype is None or t.dtype == dtype)
        )
        addresses.append(t.data_ptr() if usable and t is not None else 0)
    return addresses[0], addresses[1]


def serves(captured: tuple[int, int], now: tuple[int, int]) -> bool:
    """Whether a graph that reads k and p in place at ``captured`` (0: it copies that one) can
    serve a call whose k and p qualify to be read in place at ``now`` (``params_in_place``):
    each parameter it reads in place must be at the captured address; one it copies may be
    anywhere. Sightings forgotten, or a parameter that became readable in place (p moved onto
    the GPU), leave a graph serving; only a parameter read in place that moved does not."""
    return all(c in (0, n) for c, n in zip(captured, now, strict=True))


class _Lru(Generic[T]):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.items: OrderedDict[Hashable, T] = OrderedDict()

    def get(self, key: Hashable) -> T | None:
        value = self.items.get(key)
        if value is not None:
            self.items.move_to_end(key)
        return value

    def put(self, key: Hashable, value: T) -> list[T]:
        """Store; returns the entries this displaced: the one replaced at ``key``, and those
        evicted to make room (least recently used first)."""
        displaced = [] if (old := self.items.get(key)) is None else [old]
        self.items[key] = value
        self.items.move_to_end(key)
        while len(self.items) > self.limit:
            displaced.append(self.items.popitem(last=False)[1])
        return displaced

    def pop(self, key: Hashable) -> T | None:
        return self.items.pop(key, None)


class GraphCache(Generic[T]):
    """Captured graphs by key, keys whose capture failed, address sightings, and the in-place
    captures of small logits per call shape; each bounded (least recently used first out).
    ``lock`` serialises a lookup with the replay it leads to, so two threads replaying one graph
    cannot interleave their input copies."""

    def __init__(
        self,
        entries: int = GRAPH_ENTRIES,
        failed: int = FAILED_ENTRIES,
        seen: int = SEEN_ENTRIES,
    ) -> None:
        self.lock = threading.Lock()
        self._graphs: _Lru[T] = _Lru(entries)
        self._failed: _Lru[str] = _Lru(failed)
        self._seen: _Lru[int] = _Lru(seen)
        self._in_place: _Lru[int] = _Lru(IN_PLACE_SHAPES)  # shape -> in-place captures

    def __len__(self) -> int:
        return len(self._graphs.items)

    def sighting(self, key: Hashable) -> int:
        """Count one more call at this key; returns the count, this call included."""
        count = (self._seen.get(key) or 0) + 1
        self._seen.put(key, count)
        return count

    def get(self, key: Hashable) -> T | None:
        return self._graphs.get(key)

    def cached(self, key: Hashable) -> bool:
        """Whether a graph is cached at ``key`` (without marking it used)."""
        return key in self._graphs.items

    def may_capture_in_place(self, shape: Hashable, limit: int) -> bool:
        """Whether ``shape`` (logits of at most :data:`COPY_BYTES`) has captured fewer than
        ``limit`` in-place graphs (counted by :meth:`captured_in_place`)."""
        return (self._in_place.get(shape) or 0) < limit

    def captured_in_place(self, shape: Hashable) -> None:
        """Count one new in-place capture of ``shape`` (small logits; its success or failure),
        not one that replaces a graph at the same key."""
        self._in_place.put(shape, (self._in_place.get(shape) or 0) + 1)

    def put(self, key: Hashable, graph: T) -> list[T]:
        """Keep a captured graph; returns the graphs it displaced (replaced or evicted), which
        the caller drops only once the GPU has finished them (a replay may still run)."""
        return self._graphs.put(key, graph)

    def fail(self, key: Hashable, why: str) -> T | None:
        """Remember that ``key``'s capture failed (it runs eagerly from then on); returns the
        graph cached at ``key`` (now removed), to be dropped like a displaced one."""
        self._failed.put(key, why)
        return self._graphs.pop(key)

    def failure(self, key: Hashable) -> str | None:
        """Why this key's capture failed, or None."""
        return self._failed.get(key)

    def clear(self) -> None:
        self._graphs.items.clear()
        self._failed.items.clear()
        self._seen.items.clear()
        self._in_place.items.clear()


def capture_cuda(
    launch: Callable[[torch.Tensor], None], x: torch.Tensor, device: torch.device
) -> Callable[..., None]:
    """Capture ``launch(x)`` (already run once, so Triton has compiled what it launches) into a
    CUDA graph on a side stream; returns the graph's replay, which ignores its arguments (the
    graph reads the addresses it was captured with).

    Raises:
        Exception: whatever the capture raised; the side stream is discarded with it.
    """
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
    current = torch.cuda.current_stream(device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            launch(x)
        finally:
            graph.capture_end()
    current.wait_stream(side)

    def replay(*_: object) -> None:
        graph.replay()

    return replay
