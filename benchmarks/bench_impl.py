#!/usr/bin/env python3
"""``Resolution.impl()`` of the sampler in a fresh interpreter, against its 50 ms budget and a
reference: ``import kernelpolicy`` and the first ``resolve()`` of the same snapshot in a fresh
interpreter, what a worker pays just before (``import kernelpolicy`` alone is lazy, 0.2 ms: no
yardstick) (issue 27 item 3).

As a CUDA worker meets it: torch is imported first (not timed), then kernelpolicy resolves for
a platform snapshot (the bundled H100 fixture by default, where the sampler routes between
FlashInfer, Triton and torch), and ``impl("sampler.top_k_top_p")`` is timed alone. It must not
import Triton, the kernel modules or FlashInfer (that happens on the first call, or in a warm
step): the child checks it and says so. Also timed, for what impl() no longer pays: importing
the Triton sampler's module after torch.

Usage: python benchmarks/bench_impl.py [--runs N] [--platform FILE] [--json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import fresh, machine

ROOT = Path(__file__).resolve().parent.parent
H100 = ROOT / "kernelpolicy/fixtures/platforms/h100-sxm.json"
HEAVY = ("triton", "flashinfer", "kernelpolicy.kernels.sampling_triton")

IMPL = (
    "import torch, gc, sys, time; gc.collect(); import kernelpolicy; "
    "r = kernelpolicy.resolve(platform=kernelpolicy.load_platform({path!r})); "
    "t = time.perf_counter(); r.impl('sampler.top_k_top_p'); e = time.perf_counter() - t; "
    "heavy = [m for m in {heavy!r} if m in sys.modules]; "
    "assert not heavy, f'impl() imported {{heavy}}'; print(e)"
)
RESOLVE = (
    "import torch, gc, time; gc.collect(); t = time.perf_counter(); import kernelpolicy; "
    "kernelpolicy.resolve(platform=kernelpolicy.load_platform({path!r})); "
    "print(time.perf_counter() - t)"
)
KERNELS = (
    "import torch, gc, time; gc.collect(); t = time.perf_counter(); "
    "import kernelpolicy.kernels.sampling_triton; print(time.perf_counter() - t)"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--runs", type=int, default=11, help="fresh interpreters per measure")
    parser.add_argument("--platform", type=Path, default=H100, help="a platform snapshot")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()
    impl = fresh(IMPL.format(path=str(args.platform), heavy=HEAVY), args.runs)
    reference = fresh(RESOLVE.format(path=str(args.platform)), args.runs)
    kernels = fresh(KERNELS, args.runs)
    result = {
        "machine": machine(),
        "date": datetime.date.today().isoformat(),
        "platform": args.platform.name,
        "runs": args.runs,
        "impl_ms": round(impl * 1e3, 2),
        "import_and_resolve_ms": round(reference * 1e3, 2),
        "ratio_to_reference": round(impl / reference, 3),
        "budget_ms": 50.0,
        "ratio_to_budget": round(impl * 1e3 / 50.0, 3),
        "import_triton_sampler_ms": round(kernels * 1e3, 2),
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['machine']}, {result['date']}, platform {result['platform']}")
    print(f"median of {args.runs} fresh interpreters (torch imported first, not timed):")
    print(f"  impl('sampler.top_k_top_p')        {result['impl_ms']:8.2f} ms")
    reference_ms = result["import_and_resolve_ms"]
    print(f"  reference: import + first resolve() {reference_ms:7.2f} ms")
    print(f"  ratio impl / reference             {result['ratio_to_reference']:8.3f}")
    print(f"  ratio impl / 50 ms budget          {result['ratio_to_budget']:8.3f}")
    print(f"  not paid by impl(): import the Triton sampler {kernels * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
