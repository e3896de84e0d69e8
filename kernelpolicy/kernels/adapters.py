"""Adapters for the accelerated kernels, behind the torch fallbacks' signatures.

Each library is imported on first use (``prepare()``), never by ``import kernelpolicy``; a failure
there is reported to the Resolution, which switches the feature to its fallback for the rest of
the process. FlashInfer JIT-builds each function on its first call: its serving form
(``flashinfer_top_k_top_p.nonblocking``, which the engine uses) makes that first call in the
background, a build of :data:`FLASHINFER_BUILDS`, while the next candidate serves.

Seeded requests and the cases the policies route per call to torch are delegated to the torch
implementation here too, so a caller that skips ``select()`` still gets correct output.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

from kernelpolicy.dtypes import dtype_name
from kernelpolicy.kernels import TopKTopP, top_k_top_p_entry, torch_impl, transfer
from kernelpolicy.kernels.builds import Builds
from kernelpolicy.kernels.torch_impl import Generators


class AdapterUnavailable(RuntimeError):
    """The kernel library could not be imported or built on this machine."""


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # an ImportError, or a broken CUDA/ROCm runtime inside the import
        raise AdapterUnavailable(f"cannot import {name}: {type(exc).__name__}: {exc}") from exc


# FlashInfer (flashinfer-python), as vLLM's flashinfer_sample calls it.


def prepare_flashinfer() -> None:
    _module("flashinfer.sampling")


def _seeded_and_unfiltered_to_torch(
    kernel: Callable[[torch.Tensor, torch.Tensor | None, torch.Tensor | None], torch.Tensor],
) -> TopKTopP:
    """The sampler contract (:class:`~kernelpolicy.kernels.TopKTopP`) around a kernel that takes
    (logits, k, p): seeded rows and calls with neither k nor p go to the torch implementation,
    as the policies route them."""

    @top_k_top_p_entry
    def sampler(
        logits: torch.Tensor,
        k: torch.Tensor | None,
        p: torch.Tensor | None,
        generators: Generators = None,
        *,
        k_max: int | None = None,
    ) -> torch.Tensor:
        if generators or (k is None and p is None):
            return torch_impl.top_k_top_p(logits, k, p, generators, k_max=k_max)
        return kernel(logits, k, p)

    # the kernel's name and doc, not its signature: no __wrapped__, which inspect.signature
    # would follow to (logits, k, p)
    for name in ("__name__", "__qualname__", "__doc__"):
        setattr(sampler, name, getattr(kernel, name))
    return sampler


def _flashinfer_function(k: torch.Tensor | None, p: torch.Tensor | None) -> str:
    """The FlashInfer function a call runs (each JIT-builds on its first call)."""
    if k is None:
        return "top_p_sampling_from_probs"
    return "top_k_sampling_from_probs" if p is None else "top_k_top_p_sampling_from_logits"


FlashInferVariant = tuple[str, str, str]
"""(function, dtype it is given, device): what one FlashInfer JIT build covers."""


def _flashinfer_variant(
    logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None
) -> FlashInferVariant:
    function = _flashinfer_function(k, p)
    dtype = logits.dtype if function.endswith("_logits") else torch.float32  # probs: float32
    return function, dtype_name(dtype), str(logits.device)


def _build_flashinfer(variant: FlashInferVariant) -> None:
    """Import FlashInfer and make its first call of ``variant`` (its JIT build), on one row."""
    function, dtype, device = variant
    logits = torch.zeros(1, 128, dtype=getattr(torch, dtype), device=device)
    k = torch.ones(1, dtype=torch.int32) if "top_k" in function else None
    p = torch.full((1,), 0.5) if "top_p" in function else None
    _flashinfer(logits, k, p)


def describe_flashinfer(variant: FlashInferVariant) -> str:
    """``top_k_sampling_from_probs for float32 on cuda:0``."""
    return f"{variant[0]} for {variant[1]} on {variant[2]}"


FLASHINFER_BUILDS: Builds[FlashInferVariant] = Builds(
    "flashinfer", _build_flashinfer, describe=describe_flashinfer
)
"""FlashInfer's JIT builds in this process: the serving form below starts each in the background
(the next candidate serves meanwhile); ``warm`` builds them now."""


def flashinfer_variants(dtypes: list[str], device: str = "cuda:0") -> list[FlashInferVariant]:
    """Every FlashInfer variant the sampler's calls can need for ``dtypes`` (for ``warm``)."""
    found = {("top_p_sampling_from_probs", "float32", device)}
    found.add(("top_k_sampling_from_probs", "float32", device))
    found |= {("top_k_top_p_sampling_from_logits", dtype, device) for dtype in dtypes}
    return sorted(found)


@_seeded_and_unfiltered_to_torch
def _flashinfer_nonblocking(
    logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None
) -> torch.Tensor:
    """As :func:`flashinfer_top_k_top_p`; a variant whose JIT build has not run raises
    ``Compiling`` after starting it in the background (``FLASHINFER_BUILDS``)."""
    FLASHINFER_BUILDS.require(_flashinfer_variant(logits, k, p))
    return _flashinfer(logits, k, p)


@_seeded_and_unfiltered_to_torch
def flashinfer_top_k_top_p(
    logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None
) -> torch.Tensor:
    ids = _flashinfer(logits, k, p)
    FLASHINFER_BUILDS.mark_built(_flashinfer_variant(logits, k, p))
    return ids


flashinfer_top_k_top_p.nonblocking = _flashinfer_nonblocking  # type: ignore[attr-defined]  # builds.nonblocking_form


def _flashinfer(
    logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None
) -> torch.Tensor:
    sampling = _module("flashinfer.sampling")
    # The kernels read per-row parameters from device memory: int32 k, float32 p. A row without
    # top-k (k <= 0 or >= vocab) asks for the whole vocabulary: FlashInfer reads 0 literally.
    vocab = logits.shape[-1]
    if k is not None:
        k = torch.where((k <= 0) | (k >= vocab), vocab, k)
    # Non-blocking: a blocking host-to-device copy (k lives on the host in vLLM) waits for every
    # kernel already queued on the stream, which serialised the host with the GPU on each call;
    # a host tensor goes through pinned memory, so the copy does not wait for staging either.
    k = None if k is None else transfer.to_device(k, logits.device, torch.int32)
    p = None if p is None else transfer.to_device(p, logits.device, torch.float32)
    if k is None:
        probs = logits.softmax(dim=-1, dtype=torch.float32)
        ids = sampling.top_p_sampling_from_probs(probs, p, deterministic=True)
    elif p is None:
        probs = logits.softmax(dim=-1, dtype=torch.float32)
        ids = sampling.top_k_sampling_from_probs(probs, k, deterministic=True)
    else:
        ids = sampling.top_k_top_p_sampling_from_logits(logits, k, p, deterministic=True)
    result: torch.Tensor = ids.view(-1).to(torch.int64)
    return result


# AMD aiter (amd-aiter), as vLLM's forward_hip and SGLang's sampler call it.


def prepare_aiter() -> None:
    _module("aiter.ops.sampling")
    _module("aiter.ops.sample")


@_seeded_and_unfiltered_to_torch
def aiter_top_k_top_p(
    logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None
) -> torch.Tensor:
    sampling = _module("aiter.ops.sampling")
    probs = logits.softmax(dim=-1, dtype=torch.float32)
    if k is None:
        ids = sampling.top_p_sampling_from_probs(probs, None, p, 0.0, deterministic=True)
    elif p is None:
        renormed = sampling.top_k_renorm_probs(probs, k, 0)
        noise = torch.empty_like(renormed).exponential_()
        ids = (renormed / noise).argmax(dim=-1)
    else:
        ids = sampling.top_k_top_p_sampling_from_probs(
            probs, None, k, 0, p, 0.0, deterministic=True
        )
    result: torch.Tensor = ids.view(-1).to(torch.int64)
    return result


def aiter_greedy(logits: torch.Tensor) -> torch.Tensor:
    out = torch.empty(logits.shape[0], dtype=torch.int32, device=logits.device)
    _module("aiter.ops.sample").greedy_sample(out, logits)
    return out.to(torch.int64)
