"""Stage 5 of the flow: the implementations a Resolution hands to workers.

``torch_impl`` holds the fallbacks (always available where torch is); ``flashinfer_adapter`` and
``aiter_adapter`` wrap the accelerated kernels behind the same signatures, importing their
library on first use. ``guards`` repairs known output bugs on the device. Nothing here is imported
by ``import kernelpolicy``.
"""
