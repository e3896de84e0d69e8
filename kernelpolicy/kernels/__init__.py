"""Stage 5 of the flow: the implementations a Resolution hands to workers.

``torch_impl`` holds the fallbacks (always available where torch is; the exact torch sampler
in ``torch_sampling/``); ``sampling_triton/`` is the Triton sampler; ``adapters`` wraps the
accelerated libraries' kernels (FlashInfer, aiter) behind the same signatures, importing their
library on first use. ``builds`` runs a kernel variant's build in the background while the next
candidate serves, ``guards`` repairs known output bugs on the device, ``degraded`` records a
kernel that keeps serving slower, ``transfer`` copies per-row parameters without holding the
host. Nothing here is imported by ``import kernelpolicy``, and nothing here imports the
policies or the engine: the layers above load these.

A feature's implementations share one contract; the sampler's is :class:`TopKTopP`, which
every implementation of ``sampler.top_k_top_p`` is declared with (:func:`top_k_top_p_entry`),
so that mypy checks each against it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from kernelpolicy.kernels.torch_sampling.common import Generators

__all__ = ["TopKTopP", "top_k_top_p_entry"]


class TopKTopP(Protocol):
    """``sampler.top_k_top_p``: sample one token per row after top-k, then top-p filtering.

    Every implementation (``torch``, ``triton``, ``flashinfer``, ``aiter``, a ``--entry`` of
    yours, and each one's serving form, ``.nonblocking``) is called this way and answers the
    same question; ``kernelpolicy verify`` checks that it does.

    Semantics (vLLM's, made deterministic; the torch sampler's, :mod:`.torch_sampling`): top-k
    keeps exactly ``k`` tokens, the largest logits, and among logits tied at the k-th value the
    lowest token ids; top-p then keeps the smallest prefix of the survivors, in descending order
    with ties broken by lower token id first, whose probability reaches ``p``; the kept tokens
    are drawn in proportion to their probabilities. NaN is never drawn, ``+inf`` logits share
    all the mass, and a row with nothing finite gives token 0.

    Args:
        logits: ``[batch, vocab]``, float32, bfloat16 or float16, on the CPU or a GPU (an
            accelerated implementation runs on its device only; the policies route the rest).
        k: Per-row top-k, an integer tensor ``[batch]`` on the host or the logits' device; a
            row's ``k <= 0`` or ``>= vocab`` means no top-k for that row; None: for none.
        p: Per-row top-p, a float tensor ``[batch]``; a row's ``p >= 1`` means no top-p for
            that row; None: for none.
        generators: Row index -> ``torch.Generator`` for seeded requests: a seeded row draws
            from its own generator, so it gets the same token whatever else is in the batch
            (the same token from one implementation to the next is not promised); the other
            rows draw from the process's random state. None or empty: no seeded rows.
        k_max: An upper bound of every row's ``k`` (a row without top-k counts as ``vocab``);
            without it an implementation reads the bound from ``k``, which costs a device
            synchronisation when ``k`` lives on the GPU.

    Returns:
        ``int64 [batch]`` token ids on the logits' device, every one in ``[0, vocab)``.

    Raises:
        kernelpolicy.kernels.builds.Compiling: (``.nonblocking`` forms only) the call's variant
            is building in the background; the engine serves the call elsewhere.
        kernelpolicy.kernels.builds.BuildFailed: (``.nonblocking`` forms only) it failed to
            build in this process.
    """

    def __call__(
        self,
        logits: torch.Tensor,
        k: torch.Tensor | None,
        p: torch.Tensor | None,
        generators: Generators = None,
        *,
        k_max: int | None = None,
    ) -> torch.Tensor: ...


def top_k_top_p_entry(function: TopKTopP) -> TopKTopP:
    """Declare ``function`` an implementation of :class:`TopKTopP` (mypy checks it against the
    contract); it is returned as it is."""
    return function
