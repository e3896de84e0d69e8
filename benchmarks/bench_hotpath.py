#!/usr/bin/env python3
"""select() and gate() against the same rules written by hand, side by side in one run.

Budget (DESIGN.md): at most 1.5x the hand-written Python function. Both sides are called the
same way (keyword arguments, from a timeit loop), repeated, and the minimum of the repeats is
kept, which is the measure least disturbed by the rest of the machine. Many short samples (10,000
calls, 300 repeats) rather than a few long ones: on a shared machine a 10 ms sample reaches the
quiet floor where a 100,000-call one rarely does (2026-11-23, load average 5-7: the ratio of
the select case moved 1.71-2.25 over three runs of 15 x 100,000, 1.50-1.52 of 300 x 10,000).

Usage: python benchmarks/bench_hotpath.py [--number N] [--repeat N] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import machine

ROOT = Path(__file__).resolve().parent.parent


def use_aiter_sampler(has_generators, has_top_k, has_top_p, logprobs_mode):  # type: ignore[no-untyped-def]
    """vLLM's forward_hip rule, by hand."""
    if has_generators or not (has_top_k or has_top_p):
        return "torch"
    if logprobs_mode in ("processed_logits", "processed_logprobs"):
        return "torch"
    return "aiter"


def one_stage(dtype, hidden_dim, tokens, world_size, total_bytes, fully_connected):  # type: ignore[no-untyped-def]  # noqa: PLR0917 - the rule as vLLM writes it
    """vLLM's _rocm_aiter_fused_allreduce_rmsnorm_impl gate, by hand (PR 42409)."""
    if dtype in ("bfloat16", "float16"):
        pack = 16 // 2
        hidden_ok = hidden_dim % pack == 0 and hidden_dim // pack <= 1024
    else:
        hidden_ok = False
    if not (hidden_ok and tokens <= 80):
        return False
    if world_size == 2:
        return True
    if not fully_connected:
        return False
    if world_size <= 4:
        return total_bytes < 256 * 1024
    if world_size <= 8:
        return total_bytes < 128 * 1024
    return False


def route_sampler(has_generators, has_top_k, has_top_p, logprobs_mode, batch, dtype):  # type: ignore[no-untyped-def]  # noqa: PLR0917 - the rule as an engine would write it
    """The bundled sampler's choice on an H100 by hand: a call that gives its batch tries
    Triton first (the by_batch row from batch 1), then FlashInfer, then torch; one without, the
    candidates' order (no dtype evidence stored, so the dtype changes nothing)."""
    processed = logprobs_mode in ("processed_logits", "processed_logprobs")
    flashinfer = not has_generators and (has_top_k or has_top_p) and not processed
    if batch is not None:
        if not processed:
            return "triton"
        return "flashinfer" if flashinfer else "torch"
    if flashinfer:
        return "flashinfer"
    return "torch" if processed else "triton"


CASES = {
    "select(sampler.top_k_top_p)": (
        'hand(has_generators=False, has_top_k=True, has_top_p=True, logprobs_mode="raw_logprobs")',
        'sel("sampler.top_k_top_p", has_generators=False, has_top_k=True, has_top_p=True, '
        'logprobs_mode="raw_logprobs")',
    ),
    "select(sampler, batch, dtype) H100": (
        "route_hand(has_generators=False, has_top_k=True, has_top_p=True, "
        'logprobs_mode="raw_logprobs", batch=1024, dtype="bfloat16")',
        'route_sel("sampler.top_k_top_p", has_generators=False, has_top_k=True, has_top_p=True, '
        'logprobs_mode="raw_logprobs", batch=1024, dtype="bfloat16")',
    ),
    "gate(allreduce_rmsnorm.one_stage)": (
        'gate_hand(dtype="bfloat16", hidden_dim=2880, tokens=8, world_size=8, total_bytes=46080, '
        "fully_connected=True)",
        'gate("allreduce_rmsnorm.one_stage", dtype="bfloat16", hidden_dim=2880, tokens=8, '
        "world_size=8, total_bytes=46080, fully_connected=True)",
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--number", type=int, default=10_000, help="calls per repeat")
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import kernelpolicy

    platform = kernelpolicy.load_platform(ROOT / "kernelpolicy/fixtures/platforms/mi355x.json")
    resolution = kernelpolicy.resolve(
        platform, {"VLLM_ROCM_USE_AITER": "1", "KERNELPOLICY_LOG_FORMAT": "off"}
    )
    h100 = kernelpolicy.load_platform(ROOT / "kernelpolicy/fixtures/platforms/h100-sxm.json")
    routed = kernelpolicy.resolve(h100, {"KERNELPOLICY_LOG_FORMAT": "off"})
    names = {
        "route_hand": route_sampler,
        "route_sel": routed.select,
        "hand": use_aiter_sampler,
        "gate_hand": one_stage,
        "sel": resolution.select,
        "gate": resolution.gate,
    }
    results = {}
    for case, (hand, ours) in CASES.items():
        assert eval(hand, names) == eval(ours, names)  # the same answer before timing it
        # Interleaved, so that a noisy neighbour slows both sides alike; the minimum of each.
        hand_timer = timeit.Timer(hand, globals=names)
        ours_timer = timeit.Timer(ours, globals=names)
        t_hand = t_ours = float("inf")
        for _ in range(args.repeat):
            t_hand = min(t_hand, hand_timer.timeit(args.number))
            t_ours = min(t_ours, ours_timer.timeit(args.number))
        results[case] = {
            "hand_ns": t_hand / args.number * 1e9,
            "kernelpolicy_ns": t_ours / args.number * 1e9,
            "ratio": t_ours / t_hand,
        }
    if args.json:
        print(json.dumps({"machine": machine(), "results": results}, indent=2))
        return
    print(f"machine: {machine()}")
    for case, r in results.items():
        print(
            f"{case:<36} hand {r['hand_ns']:7.1f} ns   kernelpolicy {r['kernelpolicy_ns']:7.1f} ns"
            f"   ratio {r['ratio']:5.2f}  (budget 1.50)"
        )


if __name__ == "__main__":
    main()
