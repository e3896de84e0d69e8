"""Correctness (conformance checks) and speed of the Triton top-p experiment on a GPU."""

import json
import statistics
import sys
import time

sys.path.insert(0, "benchmarks/experiments")
import torch
from triton_top_p import top_p

from kernelpolicy.kernels import torch_impl
from kernelpolicy.verify import samplers


def sampler(logits, k, p, generators=None, **kw):
    if k is not None:
        return torch_impl.top_k_top_p(logits, k, p, generators)
    if p is None:
        p = torch.ones(logits.shape[0], device=logits.device)
    u = torch.rand(logits.shape[0], device=logits.device)
    return top_p(logits.contiguous(), p.to(logits.device, torch.float32).contiguous(), u)


res = {"robustness": [], "distribution": []}
t = time.time()
for o in samplers.robustness(sampler, "cuda"):
    if "/top_p/" in o.check:
        res["robustness"].append([o.check, o.passed, o.detail])
for o in samplers.distribution(sampler, "cuda"):
    res["distribution"].append([o.check, o.passed, o.detail])
res["check_seconds"] = time.time() - t


def timed(fn, repeat=20):
    for _ in range(3):
        fn()
    s = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        s.append(a.elapsed_time(b))
    return statistics.median(s)


for batch in (256, 1024):
    for vocab in (128256, 151936):
        bufs = [torch.randn(batch, vocab, device="cuda") * 5 for _ in range(3)]
        p = torch.full((batch,), 0.9, device="cuda")
        u = torch.rand(batch, device="cuda")
        i = [0]

        def tri():
            i[0] += 1
            return top_p(bufs[i[0] % 3], p, u)

        def tor():
            i[0] += 1
            return torch_impl.top_k_top_p(bufs[i[0] % 3], None, p)

        res[f"{batch}x{vocab}"] = {"triton_ms": timed(tri), "torch_sort_ms": timed(tor)}
for block in (256, 512, 1024):
    import triton_top_p as topp

    bufs = torch.randn(1024, 128256, device="cuda") * 5
    p = torch.full((1024,), 0.9, device="cuda")
    u = torch.rand(1024, device="cuda")
    out = torch.empty(1024, dtype=torch.int32, device="cuda")
    res[f"block{block}"] = timed(
        lambda: topp._top_p_kernel[(1024,)](
            bufs, out, p, u, 128256, bufs.stride(0), BLOCK=block, FAN=16, NPASS=8
        )
    )
print(json.dumps(res, indent=1))
