"""The plugin's route through Model Runner V2's sampler (kernelpolicy/vllm_sampling.py), without
vLLM: a stand-in for ``vllm.v1.worker.gpu.sample.sampler`` whose ``Sampler._sample_random`` has
the parameters of vLLM 0.32.0's (and 0.33.0's, one more), state as its ``SamplingStates`` keeps
it, and a plugin whose sampler and greedy choice are kernelpolicy's torch kernels
(tests/test_vllm_plugin_runner_v2_vllm.py drives the release's own class)."""

from __future__ import annotations

import logging
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from kernelpolicy.kernels import torch_impl
from kernelpolicy.vllm_sampling import MODULE, route_runner_v2, row_seed

VOCAB = 16
ALL = ("sampler.top_k_top_p", "sampler.greedy")
VLLMS = "vLLM's own"


@dataclass
class Uva:
    """vLLM's UvaBackedTensor: a host array and its device copy."""

    np: np.ndarray
    gpu: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.gpu = torch.from_numpy(self.np)


class States:
    """What vLLM 0.32.0's SamplingStates keeps per request (v1/worker/gpu/sample/states.py)."""

    def __init__(self, temperatures: list[float], seeds: list[int | None]) -> None:
        self.temperature = Uva(np.array(temperatures, dtype=np.float32))
        self.seeds = Uva(np.array([7 if s is None else s for s in seeds], dtype=np.int64))
        self.seeds_set = np.array([s is not None for s in seeds])


class Resolution:
    def __init__(self, decided: tuple[str, ...], failing: bool) -> None:
        self.decisions = dict.fromkeys(decided)
        self.failing = failing

    def impl(self, feature: str) -> Any:
        assert feature == "sampler.greedy"
        return torch_impl.greedy


class Counts:
    def __init__(self) -> None:
        self.kinds: list[str] = []

    def add(self, kind: str) -> None:
        self.kinds.append(kind)


class Plugin:
    """The plugin's side: its decisions, its counts, its sampling of one call (torch's)."""

    def __init__(self, decided: tuple[str, ...] = ALL, failing: bool = False) -> None:
        self.resolution = Resolution(decided, failing)
        self.counts = Counts()
        self.calls: list[tuple[int, list[int], str]] = []

    def sample(self, logits: Any, generators: Any, k: Any, p: Any, mode: str) -> Any:
        if self.resolution.failing:
            raise RuntimeError("kernel exploded")
        self.calls.append((int(logits.shape[0]), sorted(generators), mode))
        self.counts.add("sampler.top_k_top_p/torch")
        return torch_impl.top_k_top_p(logits, k, p, generators or None)


def _own_032(self: Any, processed_logits: Any, expanded_idx_mapping: Any, idx_mapping_np: Any,
             pos: Any, top_k: Any, top_p: Any, use_fused_sampler: bool) -> Any:  # fmt: skip
    """vLLM 0.32.0's parameters; vLLM's own answer."""
    self.own_calls += 1
    return VLLMS, processed_logits


def _own_033(self: Any, processed_logits: Any, expanded_idx_mapping: Any, idx_mapping_np: Any,
             pos: Any, top_k: Any, top_p: Any, has_topp_only_rows: bool,
             use_fused_sampler: bool) -> Any:  # fmt: skip
    """vLLM 0.33.0's: has_topp_only_rows before use_fused_sampler."""
    self.own_calls += 1
    return VLLMS, processed_logits


def _own_other(self: Any, processed_logits: Any, top_k: Any, top_p: Any) -> Any:
    """A release the route was not written for."""
    return VLLMS, processed_logits


def _sampler_class(method: Any = _own_032) -> type:
    """A class shaped as vLLM's Model Runner V2 Sampler, with ``method`` as _sample_random."""
    return type("Sampler", (), {"_sample_random": method, "own_calls": 0})


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Any:
    def installed(plugin: Plugin, cls: type | None, release: str = "0.32.0") -> bool:
        """``cls`` as V2's Sampler in a vLLM of ``release`` (None: no Model Runner V2)."""
        vllm = types.ModuleType("vllm")
        vllm.__version__ = release  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "vllm", vllm)
        if cls is None:
            monkeypatch.setitem(sys.modules, MODULE, None)  # importing it: ModuleNotFoundError
        else:
            module = types.ModuleType(MODULE)
            module.Sampler = cls  # type: ignore[attr-defined]
            monkeypatch.setitem(sys.modules, MODULE, module)
        return route_runner_v2(plugin, lambda: logging.getLogger("test"))

    return installed


def _call(cls: type, temps: list[float], seeds: list[int | None] | None = None,
          mode: str = "raw_logprobs", mask: bool = False, k: int | None = 1,
          extra: bool = False, logits: torch.Tensor | None = None) -> tuple[Any, Any]:  # fmt: skip
    """One call as vLLM's Sampler.sample makes it, by position as 0.32.0's does."""
    sampler = cls()
    rows = len(temps)
    sampler.sampling_states = States(temps, seeds or [None] * rows)
    sampler.logprobs_mode, sampler.return_sampling_mask = mode, mask
    if logits is None:
        logits = torch.arange(rows * VOCAB, dtype=torch.float32).reshape(rows, VOCAB) % 11
    top_k = None if k is None else torch.full((rows,), k, dtype=torch.int32)
    args = [logits, torch.arange(rows), np.arange(rows), torch.arange(rows) + 3, top_k, None]
    sampled, processed = sampler._sample_random(*args, *([False] if extra else []), False)
    return sampled, (sampler, processed is logits)


def _argmax(rows: int) -> list[int]:
    """Each row's argmax in the logits _call makes (top-k 1 and greedy both give it)."""
    return (torch.arange(rows * VOCAB).reshape(rows, VOCAB) % 11).argmax(-1).tolist()


@pytest.mark.parametrize(
    ("temps", "mode", "mask", "decided", "routed", "counted"),
    [
        pytest.param([1.0, 1.0], "raw_logprobs", False, ALL, True,
                     ["sampler.top_k_top_p/torch"], id="random-rows-to-the-policy"),
        pytest.param([0.0, 0.0], "raw_logprobs", False, ALL, True, ["sampler.greedy"],
                     id="greedy-rows-to-the-policys-greedy"),
        pytest.param([0.0, 0.7], "raw_logprobs", False, ALL, True,
                     ["sampler.top_k_top_p/torch", "sampler.greedy"], id="mixed-rows-both"),
        pytest.param([1.0, 1.0], "raw_logits", False, ALL, True, ["sampler.top_k_top_p/torch"],
                     id="raw-logits-mode-routed"),
        pytest.param([1.0, 1.0], "processed_logprobs", False, ALL, False, [],
                     id="processed-logprobs-stay-on-vllms"),
        pytest.param([1.0, 1.0], "processed_logits", False, ALL, False, [],
                     id="processed-logits-stay-on-vllms"),
        pytest.param([1.0, 1.0], "raw_logprobs", True, ALL, False, [],
                     id="a-sampling-mask-stays-on-vllms"),
        pytest.param([0.0, 0.0], "raw_logprobs", False, ("sampler.top_k_top_p",), False, [],
                     id="greedy-undecided-stays-on-vllms"),
        pytest.param([0.0, 1.0], "raw_logprobs", False, ("sampler.top_k_top_p",), False, [],
                     id="mixed-greedy-undecided-stays-on-vllms"),
        pytest.param([1.0, 1.0], "raw_logprobs", False, ("sampler.greedy",), False, [],
                     id="sampler-undecided-stays-on-vllms"),
        pytest.param([0.0, 0.0], "raw_logprobs", False, ("sampler.greedy",), True,
                     ["sampler.greedy"], id="greedy-only-policy-routes-greedy-calls"),
    ],
)  # fmt: skip
def test_a_call_goes_where_the_decisions_say(
    install: Any, temps: list[float], mode: str, mask: bool, decided: tuple[str, ...],
    routed: bool, counted: list[str],
) -> None:  # fmt: skip
    """Routed, the ids are the policy's (top-k 1 and greedy alike: each row's argmax) as int64
    with vLLM's processed logits passed through; otherwise vLLM's own method serves."""
    plugin, cls = Plugin(decided), _sampler_class()
    install(plugin, cls)
    sampled, (sampler, same) = _call(cls, temps, mode=mode, mask=mask)
    assert plugin.counts.kinds == counted
    assert sampler.own_calls == (0 if routed else 1)
    assert same
    if routed:
        assert sampled.dtype == torch.int64
        assert sampled.tolist() == _argmax(len(temps))
    else:
        assert sampled == VLLMS


def test_the_call_context_is_the_v1_routes(install: Any) -> None:
    """The plugin's sample() gets the rows, the seeded rows as generators and the mode."""
    plugin, cls = Plugin(), _sampler_class()
    install(plugin, cls)
    _call(cls, [1.0, 0.5, 1.0], seeds=[None, 3, 4], mode="raw_logits")
    assert plugin.calls == [(3, [1, 2], "raw_logits")]


def test_greedy_rows_take_the_greedy_choice_in_a_mixed_call(install: Any) -> None:
    """Row 0 has temperature 0: the policy's argmax (token 0 of uniform logits), whatever the
    sampler drew for it; row 1 is the sampler's draw."""
    plugin, cls = Plugin(), _sampler_class()
    install(plugin, cls)
    logits = torch.zeros(2, 4096)
    torch.manual_seed(0)
    drawn = torch_impl.top_k_top_p(logits, None, None)
    torch.manual_seed(0)
    sampled, _ = _call(cls, [0.0, 1.0], k=None, logits=logits)
    assert drawn[0] != 0  # else the case shows nothing
    assert sampled.tolist() == [0, drawn[1].item()]


def test_a_seed_repeats_at_a_position(install: Any) -> None:
    """Seeded rows draw from a generator of (seed, position): the same call twice gives the
    same tokens; unseeded rows are not held to it."""
    plugin, cls = Plugin(), _sampler_class()
    install(plugin, cls)
    logits = torch.zeros(2, 4096)  # uniform: the draw alone decides
    first, _ = _call(cls, [1.0, 1.0], seeds=[5, 5], k=None, logits=logits)
    again, _ = _call(cls, [1.0, 1.0], seeds=[5, 5], k=None, logits=logits)
    assert first.tolist() == again.tolist()


@pytest.mark.parametrize(
    ("seed", "position", "expected"),
    [
        pytest.param(0, 0, 0, id="zero"),
        pytest.param(0, 9, 9, id="position-only"),
        pytest.param(1, 0, 0x9E3779B97F4A7C15, id="seed-spread"),
        pytest.param(-1, 0, (-0x9E3779B97F4A7C15) % (1 << 64), id="negative-seed-in-range"),
        pytest.param((1 << 63) - 1, 1 << 40, None, id="largest-seed-in-range"),
    ],
)  # fmt: skip
def test_row_seed_is_in_the_generators_range(
    seed: int, position: int, expected: int | None
) -> None:
    value = row_seed(seed, position)
    assert 0 <= value < 1 << 64
    torch.Generator().manual_seed(value)  # accepted
    if expected is not None:
        assert value == expected


def test_0_33_extra_parameter_is_bound_by_name(install: Any) -> None:
    """vLLM 0.33.0 adds has_topp_only_rows before use_fused_sampler: still routed."""
    plugin, cls = Plugin(), _sampler_class(_own_033)
    install(plugin, cls)
    sampled, (sampler, _) = _call(cls, [1.0, 1.0], extra=True)
    assert (sampled.tolist(), sampler.own_calls) == (_argmax(2), 0)


def test_a_release_without_the_parameters_is_refused(install: Any) -> None:
    """A _sample_random the route was not written for: not installed, vLLM's own stays."""
    cls = _sampler_class(_own_other)
    original = cls.__dict__["_sample_random"]
    with pytest.raises(RuntimeError, match="has no expanded_idx_mapping, idx_mapping_np, pos"):
        install(Plugin(), cls)
    assert cls.__dict__["_sample_random"] is original


def test_a_failing_call_leaves_vllms_sampler_for_the_process(
    install: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The policy's sampler raises: this call and every later one go to vLLM's, one warning."""
    plugin, cls = Plugin(failing=True), _sampler_class()
    install(plugin, cls)
    with caplog.at_level(logging.WARNING, logger="test"):
        first, (sampler, _) = _call(cls, [1.0, 1.0])
        plugin.resolution.failing = False
        later, (other, _) = _call(cls, [1.0, 1.0])
    assert (first, later) == (VLLMS, VLLMS)
    assert (sampler.own_calls, other.own_calls) == (1, 1)
    assert plugin.counts.kinds == ["runner_v2/failed"]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1
    assert "routing Model Runner V2's sampler failed (kernel exploded)" in said[0]


RELEASES = {
    # release -> routed (True), refused naming the releases read (RuntimeError)
    "0.32.0, read": ("0.32.0", True),
    "0.33.0, read": ("0.33.0", True),
    "a local build of 0.33.0": ("0.33.0+rocm711", True),
    "0.31.0, not read": ("0.31.0", RuntimeError),
    "0.34.0, not read yet": ("0.34.0", RuntimeError),
    "no version": ("", RuntimeError),
}


@pytest.mark.parametrize(("release", "routed"), list(RELEASES.values()), ids=list(RELEASES))
def test_only_the_releases_read_are_routed(install: Any, release: str, routed: object) -> None:
    """V2's sampler is routed only in the releases whose code was read (knobs.PLUGIN_RUNNER_V2):
    a release with the same parameter names could still return another shape."""
    cls = _sampler_class()
    original = cls.__dict__["_sample_random"]
    if routed is True:
        assert install(Plugin(), cls, release) is True
        assert cls.__dict__["_sample_random"] is not original
        return
    with pytest.raises(RuntimeError, match=r"routed in vLLM >=0\.32\.0,<0\.34"):
        install(Plugin(), cls, release)
    assert cls.__dict__["_sample_random"] is original


def test_a_vllm_without_model_runner_v2_has_nothing_to_route(install: Any) -> None:
    """No v1/worker/gpu/sample/sampler.py (a release before V2): nothing routed, no error."""
    assert install(Plugin(), None) is False
