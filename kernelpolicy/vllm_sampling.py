"""The vLLM plugin's routes through vLLM's samplers, one per model runner.

The V1 model runner samples through ``TopKTopPSampler`` (``forward_native``/``forward_cpu``/
``forward_cuda``/``forward_hip``, ``vllm/v1/sample/ops/topk_topp_sampler.py``) and
``Sampler.greedy_sample`` (``vllm/v1/sample/sampler.py``): :func:`route_v1_sampler` and
:func:`route_v1_greedy` wrap them.

Model Runner V2 (``VLLM_USE_V2_MODEL_RUNNER``; vLLM's default on a GPU where Triton runs)
samples in ``vllm/v1/worker/gpu/sample/sampler.py``: ``Sampler.sample`` applies the penalties,
temperature and min-p, then hands the rest to ``Sampler._sample_random(processed_logits,
expanded_idx_mapping, idx_mapping_np, pos, top_k, top_p, [has_topp_only_rows,]
use_fused_sampler)``, which runs FlashInfer's (or XPU's) fused sampler or vLLM's top-k/top-p
mask and its Gumbel-max draw (an argmax for temperature-0 rows) and returns ``(sampled int64
[rows], processed_logits)`` (vLLM 0.32.0, its CPU and CUDA wheels alike; 0.33.0 adds
``has_topp_only_rows``). It never calls the V1 hooks (``gpu/model_runner.py``: "V2 bypasses
TopKTopPSampler", 0.32.0). :func:`route_runner_v2` wraps ``_sample_random`` the same way: a
call's rows go to ``resolve().select("sampler.top_k_top_p", ...)`` with the V1 route's call
context, its temperature-0 rows to the policy's ``sampler.greedy``. A request's explicit seed
becomes a ``torch.Generator`` seeded from the seed and the token's position (:func:`row_seed`),
so a seed repeats as with vLLM's own draw (a hash of seed and position, ``gumbel.py``); the
tokens drawn differ from vLLM's, as on V1.

vLLM keeps its own path for a call whose processed logits it returns (a processed logprobs
mode; V2's ``return_sampling_mask``), for V2's greedy rows where no policy decides
``sampler.greedy``, and for V2's watermarked rows (``vllm/v1/watermarking/gpu_sampler.py``
overrides ``_sample_random``, calling the base's for a batch without them). A call that fails
sends every later call of that hook in the process to vLLM's own.
"""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any, Protocol

__all__ = ["NEEDED", "Routes", "route_runner_v2", "route_v1_greedy", "route_v1_sampler", "row_seed"]

NEEDED = ("processed_logits", "expanded_idx_mapping", "idx_mapping_np", "pos", "top_k", "top_p")
"""The parameters of ``Sampler._sample_random`` the route reads (by name)."""
PROCESSED = ("processed_logits", "processed_logprobs")
MODULE = "vllm.v1.worker.gpu.sample.sampler"

_MIX = 0x9E3779B97F4A7C15  # an odd 64-bit constant (the golden ratio's): seeds spread apart
_MASK = (1 << 64) - 1


class Routes(Protocol):
    """What the routes take from the plugin (``kernelpolicy.vllm_plugin._Plugin``): its
    decisions now, its call counts and its sampling of one call."""

    @property
    def resolution(self) -> Any: ...

    @property
    def counts(self) -> Any: ...

    def sample(self, logits: Any, generators: Any, k: Any, p: Any, mode: str) -> Any: ...


class _GiveUp:
    """Where a routed hook's call fails: one warning (and a count, where ``count`` names its
    kind), and every later call of that hook in this process goes to vLLM's own."""

    def __init__(
        self,
        plugin: Routes,
        log: Callable[[], logging.Logger],
        warning: str,
        count: str | None = None,
    ) -> None:
        self.given_up = False
        self._plugin, self._log, self._warning, self._count = plugin, log, warning, count

    def __call__(self, exc: Exception) -> None:
        """Give up on this hook: ``exc`` is what its call raised."""
        self.given_up = True
        self._log().warning(self._warning, exc)
        if self._count is not None:
            self._plugin.counts.add(self._count)


_FROM_NOW = "; vLLM's own sampler serves every call of this process from now on"


def row_seed(seed: int, position: int) -> int:
    """The seed of one token's draw: a function of the request's seed and the token's position
    only, in the range ``torch.Generator.manual_seed`` takes."""
    return (seed * _MIX + position) & _MASK


def route_v1_sampler(plugin: Routes, log: Callable[[], logging.Logger]) -> None:
    """Route every ``forward_*`` of the V1 runner's ``TopKTopPSampler`` this vLLM has."""
    from vllm.v1.sample.ops import topk_topp_sampler

    cls = topk_topp_sampler.TopKTopPSampler
    for name in ("forward_native", "forward_cpu", "forward_cuda", "forward_hip"):
        original = getattr(cls, name, None)
        if original is not None:
            setattr(cls, name, _routed_v1(plugin, original, log))


def _routed_v1(
    plugin: Routes, original: Callable[..., Any], log: Callable[[], logging.Logger]
) -> Callable[..., Any]:
    give_up = _GiveUp(
        plugin, log, "kernelpolicy: routing the sampler failed (%s)" + _FROM_NOW,
        "sampler.top_k_top_p/failed",
    )  # fmt: skip

    def forward(self: Any, logits: Any, generators: Any, k: Any, p: Any) -> Any:
        mode = getattr(self, "logprobs_mode", "raw_logprobs")
        if mode in PROCESSED or give_up.given_up:
            return original(self, logits, generators, k, p)
        try:
            return plugin.sample(logits, generators, k, p, mode), None
        except Exception as exc:  # never take vLLM down: its own sampler from now on
            give_up(exc)
            return original(self, logits, generators, k, p)

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward


def route_v1_greedy(plugin: Routes, log: Callable[[], logging.Logger]) -> None:
    """The V1 runner's ``Sampler.greedy_sample`` runs the policy's greedy implementation."""
    from vllm.v1.sample import sampler

    plugin.resolution.impl("sampler.greedy")  # loads now: a failure leaves vLLM's own
    original = sampler.Sampler.greedy_sample
    give_up = _GiveUp(plugin, log, "kernelpolicy: greedy sampling failed (%s); vLLM's own from now")

    def greedy_sample(logits: Any) -> Any:
        if give_up.given_up:
            return original(logits)
        try:
            ids = plugin.resolution.impl("sampler.greedy")(logits)
        except Exception as exc:  # never take vLLM down: its own argmax from now on
            give_up(exc)
            return original(logits)
        plugin.counts.add("sampler.greedy")
        return ids

    sampler.Sampler.greedy_sample = staticmethod(greedy_sample)


def route_runner_v2(plugin: Routes, log: Callable[[], logging.Logger]) -> bool:
    """Route ``Sampler._sample_random`` of Model Runner V2 through the plugin's decisions.

    Returns:
        False where this vLLM has no Model Runner V2: nothing to route.

    Raises:
        RuntimeError: A release whose V2 sampler was not read (outside
            ``knobs.PLUGIN_RUNNER_V2``), or a ``_sample_random`` that lacks a parameter the
            route reads: vLLM keeps its own sampler there.
    """
    import importlib

    from kernelpolicy.knobs import PLUGIN_RUNNER_V2, runner_v2_routed

    try:
        cls = importlib.import_module(MODULE).Sampler
    except ModuleNotFoundError:
        return False
    release = str(getattr(sys.modules.get("vllm"), "__version__", "") or "")
    if not runner_v2_routed("vllm", release):
        raise RuntimeError(
            f"Model Runner V2's sampler is routed in vLLM {PLUGIN_RUNNER_V2['vllm']} (read "
            f"from their code), not in {release or 'this release'}"
        )
    original = cls._sample_random
    names = tuple(inspect.signature(original).parameters)[1:]  # after self
    missing = [name for name in NEEDED if name not in names]
    if missing:
        raise RuntimeError(f"{MODULE}.Sampler._sample_random has no {', '.join(missing)}")
    cls._sample_random = _routed_v2(plugin, original, names, log)
    return True


def _routed_v2(
    plugin: Routes,
    original: Callable[..., Any],
    names: tuple[str, ...],
    log: Callable[[], logging.Logger],
) -> Callable[..., Any]:
    give_up = _GiveUp(
        plugin, log, "kernelpolicy: routing Model Runner V2's sampler failed (%s)" + _FROM_NOW,
        "runner_v2/failed",  # its sampler or its greedy rows: the route
    )  # fmt: skip

    def _sample_random(self: Any, *args: Any, **kwargs: Any) -> Any:
        returned = self.logprobs_mode in PROCESSED or getattr(self, "return_sampling_mask", False)
        if give_up.given_up or returned:  # vLLM returns the processed logits: its own path
            return original(self, *args, **kwargs)
        call = dict(zip(names, args, strict=False)) | kwargs
        try:
            sampled = _sample(plugin, self, call)
        except Exception as exc:  # never take vLLM down: its own sampler from now on
            give_up(exc)
            return original(self, *args, **kwargs)
        if sampled is None:
            return original(self, *args, **kwargs)
        return sampled, call["processed_logits"]

    _sample_random.__wrapped__ = original  # type: ignore[attr-defined]
    return _sample_random


def _sample(plugin: Routes, sampler: Any, call: Mapping[str, Any]) -> Any:
    """The sampled ids (int64, one per row) as the decisions say, or None where vLLM decides."""
    import torch

    states = sampler.sampling_states
    logits, rows = call["processed_logits"], call["expanded_idx_mapping"]
    greedy_requests = states.temperature.np[call["idx_mapping_np"]] == 0.0
    decisions = plugin.resolution.decisions
    greedy_decided = "sampler.greedy" in decisions
    if greedy_requests.all():
        return _greedy(plugin, logits) if greedy_decided else None
    if "sampler.top_k_top_p" not in decisions or (greedy_requests.any() and not greedy_decided):
        return None
    generators = _generators(states, rows, call["idx_mapping_np"], call["pos"], logits.device)
    mode = sampler.logprobs_mode
    sampled = plugin.sample(logits, generators, call["top_k"], call["top_p"], mode)
    sampled = sampled.to(torch.int64)  # FlashInfer's ids are int32; vLLM's rows are int64
    if greedy_requests.any():
        greedy = states.temperature.gpu[rows] == 0.0
        sampled = torch.where(greedy, _greedy(plugin, logits), sampled)
    return sampled


def _greedy(plugin: Routes, logits: Any) -> Any:
    ids = plugin.resolution.impl("sampler.greedy")(logits)
    plugin.counts.add("sampler.greedy")
    return ids.to(logits.device).long()


def _generators(states: Any, rows: Any, requests: Any, pos: Any, device: Any) -> dict[int, Any]:
    """Row -> generator for the rows of requests with an explicit seed (none: no read of the
    device's tensors)."""
    if not states.seeds_set[requests].any():
        return {}
    import torch

    generators = {}
    for row, (request, position) in enumerate(zip(rows.tolist(), pos.tolist(), strict=True)):
        if states.seeds_set[request]:
            generator = torch.Generator(device=device)
            generator.manual_seed(row_seed(int(states.seeds.np[request]), int(position)))
            generators[row] = generator
    return generators
