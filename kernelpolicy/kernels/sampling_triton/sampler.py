"""The Triton sampler as an object: its tuning, its kernels, its random draws, and the state
it builds while serving (compiled variants, CUDA graphs, work buffers, failure records).

``sampling_triton.top_k_top_p`` calls the process's default :class:`Sampler`; a test, a tuning
script or a second configuration builds its own, which shares nothing with the default.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import torch

from kernelpolicy.kernels import transfer
from kernelpolicy.kernels.build_threads import start_thread
from kernelpolicy.kernels.builds import Builds
from kernelpolicy.kernels.cache_lookup import kernel_cache
from kernelpolicy.kernels.sampling_triton import choose, graphs, launch, preload, replay, variants
from kernelpolicy.kernels.sampling_triton.cached import CachedVariants
from kernelpolicy.kernels.sampling_triton.child import CannotStart, Child, task_of
from kernelpolicy.kernels.sampling_triton.draws import Draws
from kernelpolicy.kernels.sampling_triton.failures import Failures
from kernelpolicy.kernels.sampling_triton.jit import Kernels
from kernelpolicy.kernels.sampling_triton.parts import Capture
from kernelpolicy.kernels.sampling_triton.scratch import Scratch, ScratchCache, stream_id
from kernelpolicy.kernels.sampling_triton.tuning import Tuning
from kernelpolicy.kernels.sampling_triton.variants import Call, Variant
from kernelpolicy.kernels.torch_impl import Generators

if TYPE_CHECKING:
    from kernelpolicy.kernel_cache import BuiltRecord


def build_variant(s: Sampler, variant: Variant) -> None:
    """Compile ``variant``: one eager call of one row of it, on a side stream (off CUDA, the
    caller's), in work buffers of its own, so that the calls being served meanwhile share
    nothing with it. A dtype whose kernels fail is read as float32, as a call would be. On
    CUDA the kernels the kernel cache keeps for it are handed to Triton first, and the ones
    the call launches are noted for its index (``preload.py``).

    Raises:
        Exception: the compiler's error, when even float32 fails.
    """
    device = torch.device(variant.device)
    has_p = variant.rows[1]
    k = None if variant.k_dtype is None else torch.ones(1, dtype=variant.k_dtype)
    p = torch.full((1,), 0.5) if has_p else None
    logits = torch.zeros(1, variant.vocab, dtype=variant.dtype, device=device)
    call = Call(logits, k, p, variant.size, variant.rows, variant)
    w = Scratch(1, variant.vocab, variant.size, device, s.tuning)
    with _side_stream(device):
        cuda = device.type == "cuda"
        # a variant the kernel cache keeps: its kernels without Triton's lookup
        preloaded = s.cached.load(variant) if cuda else []
        note = cuda and not preloaded  # a variant loaded from its index has its index
        noting: contextlib.AbstractContextManager[set[tuple[str, str]]] = (
            preload.recording(s.kernels) if note else contextlib.nullcontext(set())
        )
        with noting as used:
            try:
                _run_once(s, logits, call, w)
            except Exception:
                if not preloaded:
                    raise
                preload.forget(s.kernels, preloaded)  # Triton looks them up itself, as before
                _run_once(s, logits, call, w)
        if cuda:
            torch.cuda.current_stream(device).synchronize()
        if note:
            s.cached.produced[variant] = preload.entries(s.kernels, used)


def _run_once(s: Sampler, logits: torch.Tensor, call: Call, w: Scratch) -> None:
    """One eager call; a dtype whose kernels fail is read as float32 from now on, as a call
    would be."""
    x = logits.float() if logits.dtype in s.failures.upcast else logits
    try:
        s.eager(x, call, None, w)
    except Exception as exc:
        if x.dtype == torch.float32:
            raise
        s.failures.upcast[x.dtype] = f"{type(exc).__name__}: {str(exc)[:300]}"
        s.eager(x.float(), call, None, w)


def _side_stream(device: torch.device) -> contextlib.ExitStack:
    """A stream of its own for a build on CUDA (with its device current); nothing elsewhere."""
    stack = contextlib.ExitStack()
    if device.type == "cuda":
        stack.enter_context(torch.cuda.device(device))
        stack.enter_context(torch.cuda.stream(torch.cuda.Stream(device)))  # type: ignore[no-untyped-call]
    return stack


class Sampler:
    """Sort-free top-k/top-p sampling (the package doc), with everything it keeps.

    Args:
        tuning: Tile sizes, buffers, warps and switches (``Tuning()``: the H100's choice).
        kernels: The kernels it launches (``Kernels()``: the package's).
        draws: Its uniforms (``Draws()``: torch's generator).
        capture: Captures a CUDA graph (``graphs.capture_cuda``).
        failures: Its failure records (fresh ones unless given; the default sampler's are
            the package's ``UPCAST``, ``WIDE_FAILED``, ...).
        build: Builds one variant (``build_variant``: one eager call on a small input of the
            variant, in its own work buffers); the tests' fake blocks on an Event.
        start: Runs a build in the background (``build_threads.start_thread``; tests may run it
            inline: the call that needs the variant then builds it first).
        name: The sampler's name in build notes and ``builds.stats()``.
        cache: The record of the node's kernel cache in use, or None (``builds.kernel_cache``):
            a variant recorded there is built in the calling thread (a cache read), and each
            variant built is recorded (``cached.py``).
        child: How a background build compiles a variant in a child process before ``build``
            loads it from Triton's cache (``child.py``: CUDA variants, with the package's
            kernels); None: every background build compiles in its thread.
    """

    def __init__(
        self,
        tuning: Tuning | None = None,
        *,
        kernels: Kernels | None = None,
        draws: Draws | None = None,
        capture: Capture = graphs.capture_cuda,
        failures: Failures | None = None,
        build: Callable[[Sampler, Variant], None] = build_variant,
        start: Callable[[Callable[[], None], str], None] = start_thread,
        name: str = "triton sampler",
        cache: Callable[[], BuiltRecord | None] = kernel_cache,
        child: Child | None = Child(),  # noqa: B008  # frozen: one shared value is safe
    ) -> None:
        self.tuning = tuning or Tuning()
        self.kernels = kernels or Kernels()
        self.draws = draws or Draws()
        self.capture = capture
        self.failures = failures or Failures()
        self.degradations = self.failures.degradations  # what a Resolution listens to
        self.graphs: graphs.GraphCache[replay.Graph] = graphs.GraphCache()
        self.scratch = ScratchCache(self.tuning)
        self.cached = CachedVariants(self.tuning, self.kernels, cache)
        self.child = child
        self._build = build
        self.builds: Builds[Variant] = Builds(
            name,
            lambda variant: build(self, variant),
            describe=Variant.describe,
            start=start,
            cache=self.cached,
            background=self._background,
        )

    def __repr__(self) -> str:
        return f"<Sampler {self.builds.name}: {self.builds.stats()}>"

    def __call__(
        self,
        logits: torch.Tensor,
        k: torch.Tensor | None,
        p: torch.Tensor | None,
        generators: Generators = None,
        *,
        k_max: int | None = None,
    ) -> torch.Tensor:
        """Sample one token per row after top-k and then top-p filtering
        (:class:`kernelpolicy.kernels.TopKTopP`; how: the package doc), building the kernels
        the call needs inline when they are not built yet.

        ``k`` on the host costs nothing; on the GPU, pass ``k_max`` or its maximum is read with
        a device synchronisation. Rows whose ``k`` is ``<= 0`` or ``>= vocab`` are top-p (or
        plain) rows. A ``k`` above ``tuning.max_k`` goes through the torch implementation.
        """
        call = variants.prepare(self.tuning, logits, k, p, k_max)
        if call.variant is None:
            return _torch(logits, call, generators, k_max)
        result = self._run(call, generators)
        self.builds.mark_built(call.variant)
        return result

    def nonblocking(
        self,
        logits: torch.Tensor,
        k: torch.Tensor | None,
        p: torch.Tensor | None,
        generators: Generators = None,
        *,
        k_max: int | None = None,
    ) -> torch.Tensor:
        """As a call of the sampler, but a call whose variant is not built yet starts its build
        in the background and raises instead of waiting (the engine serves it elsewhere).

        Raises:
            kernelpolicy.kernels.builds.Compiling: the call's variant is building.
            kernelpolicy.kernels.builds.BuildFailed: it failed to build in this process.
        """
        call = variants.prepare(self.tuning, logits, k, p, k_max)
        if call.variant is None:
            return _torch(logits, call, generators, k_max)
        self.builds.require(call.variant)
        return self._run(call, generators)

    def variant(
        self,
        logits: torch.Tensor,
        k: torch.Tensor | None,
        p: torch.Tensor | None,
        *,
        k_max: int | None = None,
    ) -> Variant | None:
        """The variant a call needs built (None: it goes to the torch implementation)."""
        return variants.prepare(self.tuning, logits, k, p, k_max).variant

    def warm(self, wanted: Iterable[Variant]) -> dict[Variant, str]:
        """Build each variant now, in this thread (``variants.of`` lists them for a model).

        Returns:
            The variants that failed to build, with why (their calls go to the fallback).
        """
        return self.builds.warm(wanted)

    def _background(self, variant: Variant) -> None:
        """A background build: compiled in a child process where one can build it
        (``child.py``), then loaded here from Triton's cache by ``build``; else compiled here."""
        child = self.child
        if child is not None and child.takes(variant) and self.kernels == Kernels():
            # no process to be had (CannotStart): the thread compiles it, as before
            with contextlib.suppress(CannotStart):
                child.compile(task_of(self.tuning, variant))
        self._build(self, variant)

    def _run(self, call: Call, generators: Generators) -> torch.Tensor:
        """The kernels, on the logits as they are, or as float32 once their dtype failed."""
        x = call.logits.float() if call.logits.dtype in self.failures.upcast else call.logits
        try:
            return self.pipeline(x, call, generators)
        except Exception as exc:  # the kernels do not build for this dtype here: read float32
            if x.dtype == torch.float32:
                raise
            self.failures.upcast[x.dtype] = f"{type(exc).__name__}: {str(exc)[:300]}"
            return self.pipeline(x.float(), call, generators)

    def pipeline(self, x: torch.Tensor, call: Call, generators: Generators) -> torch.Tensor:
        """One call: replayed from a CUDA graph where ``graphs.plan`` allows it, else eager."""
        batch, vocab = x.shape
        nbytes = x.numel() * x.element_size()
        groups_first = nbytes >= self.tuning.groups_first_bytes
        shape: tuple[object, ...] = (x.device, stream_id(x.device), batch, vocab, x.dtype)
        shape = (*shape, call.size, call.k_dtype, *call.rows, groups_first)
        with self.graphs.lock:
            mode, key, where, params = choose.plan(self, shape, x, call.k, call.p, bool(generators))
            if mode is not graphs.Mode.EAGER and self.graphs.failure(key) is None:
                graph = self.graphs.get(key)
                replacing = graph is not None and not graphs.serves(graph.params, where)
                if replacing:  # k or p moved: a graph that copies them takes over
                    graph, params = None, (0, 0)
                if graph is not None:
                    return graph.run(x, call.k, call.p)
                small = nbytes <= graphs.COPY_BYTES
                if mode is graphs.Mode.IN_PLACE and small and not replacing:
                    self.graphs.captured_in_place(shape)
                graph = replay.Graph(
                    self, x, call.k, call.size, call.rows, mode, groups_first, params
                )
                return graph.first_run(key, x, call.k, call.p)
        return self.eager(x, call, generators)

    def eager(
        self,
        x: torch.Tensor,
        call: Call,
        generators: Generators,
        scratch: Scratch | None = None,
    ) -> torch.Tensor:
        """One call launched kernel by kernel (``scratch``: else the cached work buffers)."""
        x = launch.servable(x)  # read as the build read it, with no compile of its own
        batch, vocab = x.shape
        device = x.device
        w = scratch or self.scratch.get(batch, vocab, call.size, device)
        launch.groups_pass(self, x, w, call.size)  # first: it needs neither k, p nor uniforms
        u = self.draws.uniform(batch, device, generators)
        proposals = self.tuning.proposals if call.rows[2] else 0
        q = self.draws.proposals(batch, proposals, device, generators) if proposals else u
        # non-blocking: a blocking host-to-device copy waits for the whole stream
        k_dev = u if call.k is None else transfer.to_device(call.k, device).contiguous()
        p_dev = u if call.p is None else transfer.to_device(call.p, device, torch.float32)
        p_dev = p_dev.contiguous()
        out = torch.empty(batch, dtype=torch.int64, device=device)
        launch.after_groups(self, x, w, call.size, k_dev, p_dev, (u, q), out, call.rows)
        return out


def _torch(
    logits: torch.Tensor, call: Call, generators: Generators, k_max: int | None
) -> torch.Tensor:
    """A call the kernels do not take (k above ``max_k``): the torch implementation."""
    from kernelpolicy.kernels import torch_impl

    return torch_impl.top_k_top_p(logits, call.k, call.p, generators, k_max=k_max)
