"""Calls through Model Runner V2's own ``Sampler.sample`` in the installed vLLM (the CPU build),
after kernelpolicy's plugin installed as vLLM's entry point runs it; prints one JSON line.

vLLM's CPU build cannot start Model Runner V2 without Triton's CPU backend (vllm/config/vllm.py
``_validate_v2_model_runner``: "Model Runner V2 requires Triton.", 0.32.0), so this drives the
release's class directly, as its model runner would: requests added to its ``SamplingStates``,
then ``Sampler.sample`` (penalties and temperature left out: no request needs them, so
``apply_sampling_params`` returns the logits as they are). Where the route leaves a call to
vLLM, a stand-in for vLLM's own ``_sample_random`` answers (its Gumbel draw is a Triton kernel,
which this build cannot run) and counts it.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from typing import Any

logging.basicConfig(level=logging.INFO, stream=sys.stderr)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import vllm.v1.worker.cpu.shm  # noqa: E402, F401  the CPU worker's buffers (cpu_worker.py does it)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.worker.gpu.sample import sampler as runner_v2  # noqa: E402
from vllm.v1.worker.gpu.sample.states import SamplingStates  # noqa: E402

import kernelpolicy.vllm_plugin as plugin  # noqa: E402

VOCAB = 64
OWN: list[int] = []


@functools.wraps(runner_v2.Sampler._sample_random)  # the release's parameters, as the route reads
def vllms_own(self: Any, processed_logits: Any, *args: Any, **kwargs: Any) -> Any:
    OWN.append(int(processed_logits.shape[0]))
    return torch.full((processed_logits.shape[0],), -1), processed_logits


def sampler(requests: list[SamplingParams], mode: str = "raw_logprobs") -> Any:
    made = runner_v2.Sampler.__new__(runner_v2.Sampler)
    made.sampling_states = SamplingStates(8, VOCAB)
    for index, params in enumerate(requests):
        made.sampling_states.add_request(index, params)
    made.sampling_states.apply_staged_writes()
    made.logprobs_mode, made.return_sampling_mask = mode, False
    made.needs_logits_processing = np.zeros(8, dtype=bool)
    made.use_flashinfer = made.use_xpu_sampler = False
    return made


def sample(made: Any, logits: torch.Tensor) -> list[int]:
    rows = int(logits.shape[0])
    index = torch.arange(rows, dtype=torch.int32)
    sampled, _ = made.sample(
        logits=logits, expanded_idx_mapping=index, idx_mapping=index,
        idx_mapping_np=np.arange(rows, dtype=np.int32), pos=torch.full((rows,), 3),
        input_ids=torch.zeros(rows, dtype=torch.int64), expanded_local_pos=torch.zeros(rows),
        seq_lens_upper_bound_np=np.full(rows, 4),
    )  # fmt: skip
    assert sampled.dtype == torch.int64, sampled.dtype
    return [int(x) for x in sampled.tolist()]


def seeded_draw(seed: int, position: int) -> list[int]:
    """kernelpolicy's torch sampler on uniform logits with the generator the route makes."""
    from kernelpolicy.kernels import torch_impl
    from kernelpolicy.vllm_sampling import row_seed

    generator = torch.Generator().manual_seed(row_seed(seed, position))
    return torch_impl.top_k_top_p(torch.zeros(1, VOCAB), None, None, {0: generator}).tolist()


def main() -> None:
    runner_v2.Sampler._sample_random = vllms_own
    plugin.register()
    torch.manual_seed(0)
    logits = torch.randn(2, VOCAB)
    top_1 = SamplingParams(temperature=1.0, top_k=1)
    seeded = SamplingParams(temperature=1.0, seed=11)
    out: dict[str, Any] = {
        "routed": hasattr(runner_v2.Sampler._sample_random, "__wrapped__"),
        "argmax": logits.argmax(-1).tolist(),
        "one_row": sample(sampler([top_1]), logits[:1]),
        "two_rows": sample(sampler([top_1, top_1]), logits),
        "greedy": sample(sampler([SamplingParams(temperature=0.0)] * 2), logits),
        "seeded": [sample(sampler([seeded]), torch.zeros(1, VOCAB)) for _ in range(2)],
        "seeded_expected": seeded_draw(11, 3),
    }
    own_before = len(OWN)
    out["processed"] = sample(sampler([top_1], "processed_logprobs"), logits[:1])
    out["own"] = OWN[own_before:]
    out["own_before"] = own_before
    print(json.dumps(out))


if __name__ == "__main__":
    main()
