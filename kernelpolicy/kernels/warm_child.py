"""One build process of ``kernelpolicy warm``: build the variants of one task, in this process
(its TRITON_CACHE_DIR and FLASHINFER_WORKSPACE_BASE point at the kernel cache).

Usage: python -m kernelpolicy.kernels.warm_child '{"impl": "triton", "dtype": ..., "vocab": ...}'
Prints the failures and exits 1 when a variant failed to build.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    task = json.loads(sys.argv[1])
    import torch

    device, dtype = task["device"], task["dtype"]
    failures: list[str]
    if task["impl"] == "triton":
        from kernelpolicy.kernels import sampling_triton

        dtypes, vocabs = [getattr(torch, dtype)], [task["vocab"]]
        wanted = sampling_triton.variants_of(dtypes, vocabs, device=device)
        failures = [f"{k}: {v}" for k, v in sampling_triton.warm(wanted).items()]
    else:
        from kernelpolicy.kernels import adapters

        flashinfer = adapters.flashinfer_variants([dtype], device)
        failures = [f"{k}: {v}" for k, v in adapters.FLASHINFER_BUILDS.warm(flashinfer).items()]
    if failures:
        print("; ".join(failures[:3])[:500])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
