"""EXPERIMENT: where the time of ``select()``'s budget case goes, part by part.

The generated ``select`` (MI355X, aiter chosen: the budget case of ``bench_hotpath.py``) is
rebuilt from its own source with one part taken out at a time and timed side by side with the
hand-written rule, interleaved, minimum of many short samples. The variants are not correct
``select`` functions (each drops a check the real one needs); they only measure what a part
costs. ``hand, select's signature`` is the hand-written body behind ``select``'s parameters.

Usage: python benchmarks/experiments/hotpath_parts.py [--number N] [--repeat N]
"""

from __future__ import annotations

import argparse
import re
import sys
import timeit
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from _harness import machine  # noqa: E402 - after the path above
from bench_hotpath import use_aiter_sampler  # noqa: E402

import kernelpolicy  # noqa: E402
from kernelpolicy.engine import hotpath  # noqa: E402

POSITIONAL_GUARD = "    if _p is not _P:\n        raise _positional('select')\n"
MEMO = re.compile(  # the string test's memo (engine.string_memos), and the local it answers
    r"( *)try:\n +_s0_0 = _m0_0\[logprobs_mode\]\n +except KeyError:\n"
    r" +_s0_0 = _first_sight\(.*\)\n( *)if True:"
)
TEST = "(not _s0_0)"
BEFORE = (
    "if type(logprobs_mode) is str:",
    "(not logprobs_mode in ('processed_logits', 'processed_logprobs'))",
)
CALL = (
    '("sampler.top_k_top_p", has_generators=False, has_top_k=True, has_top_p=True, '
    'logprobs_mode="raw_logprobs")'
)


def hand_with_select_signature(  # type: ignore[no-untyped-def]
    _name, _p=None, /, batch=None, dtype=None, has_generators=None, has_top_k=None,
    has_top_p=None, logprobs_mode=None, vocab_size=None,
):  # fmt: skip
    if has_generators or not (has_top_k or has_top_p):
        return "torch"
    if logprobs_mode in ("processed_logits", "processed_logprobs"):
        return "torch"
    return "aiter"


def generated() -> tuple[Any, str, dict[str, Any]]:
    """The budget case's ``select``, with its source and scope (kept as they are compiled)."""
    kept: dict[str, tuple[str, dict[str, Any]]] = {}
    compile_one = hotpath._compile

    def keep(name: str, lines: list[str], scope: dict[str, Any]) -> Any:
        kept[name] = ("\n".join(lines), scope)
        return compile_one(name, lines, scope)

    hotpath._compile = keep  # only to read the source; restored below
    try:
        platform = kernelpolicy.load_platform(ROOT / "kernelpolicy/fixtures/platforms/mi355x.json")
        resolution = kernelpolicy.resolve(
            platform, {"VLLM_ROCM_USE_AITER": "1", "KERNELPOLICY_LOG_FORMAT": "off"}
        )
    finally:
        hotpath._compile = compile_one
    source, scope = kept["select"]
    return resolution.select, source, scope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--number", type=int, default=10_000, help="calls per sample")
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    select, source, scope = generated()
    assert POSITIONAL_GUARD in source, "the generated code changed"
    assert MEMO.search(source), "the generated code changed"
    assert TEST in source, "the generated code changed"

    def variant(text: str) -> Any:
        namespace = dict(scope)
        exec(compile(text, "<variant>", "exec"), namespace)  # the generated source, edited
        return namespace["select"]

    functions = {
        "hand, select's signature": hand_with_select_signature,
        "select": select,
        "select, no positional guard": variant(source.replace(POSITIONAL_GUARD, "")),
        "select, its type guard and test before the memo": variant(
            MEMO.sub(lambda m: m.group(2) + BEFORE[0], source).replace(TEST, BEFORE[1])
        ),
        "select, no string check": variant(
            MEMO.sub(lambda m: m.group(2) + "if True:", source).replace(TEST, "True")
        ),
    }
    timers = {
        "hand": timeit.Timer(
            'f(has_generators=False, has_top_k=True, has_top_p=True, logprobs_mode="raw_logprobs")',
            globals={"f": use_aiter_sampler},
        )
    }
    for name, function in functions.items():
        assert eval("f" + CALL, {"f": function}) == "aiter"
        timers[name] = timeit.Timer("f" + CALL, globals={"f": function})
    best = dict.fromkeys(timers, float("inf"))
    for _ in range(args.repeat):  # interleaved: a noisy neighbour slows every variant alike
        for name, timer in timers.items():
            best[name] = min(best[name], timer.timeit(args.number))
    print(f"machine: {machine()}")
    for name, seconds in best.items():
        ns = seconds / args.number * 1e9
        print(f"{name:<50} {ns:6.1f} ns   {seconds / best['hand']:.2f}x hand")


if __name__ == "__main__":
    main()
