"""Stage 5 of the flow: the implementations a Resolution hands to workers.

``torch_impl`` holds the fallbacks (always available where torch is; the exact torch sampler
in ``torch_sampling/``); ``sampling_triton/`` is the Triton sampler; ``adapters`` wraps the
accelerated libraries' kernels (FlashInfer, aiter) behind the same signatures, importing their
library on first use. ``builds`` runs a kernel variant's build in the background while the next
candidate serves, ``guards`` repairs known output bugs on the device, ``degraded`` records a
kernel that keeps serving slower, ``transfer`` copies per-row parameters without holding the
host. Nothing here is imported by ``import kernelpolicy``, and nothing here imports the
policies or the engine: the layers above load these.
"""
