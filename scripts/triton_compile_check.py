#!/usr/bin/env python3
"""Compile every Triton kernel launch of the sampler for a CUDA target without a GPU: the
launches of one call are recorded instead of run (CPU tensors, serving sizes: vocab 128256,
k 50, p 0.9), and each is compiled by Triton's own compiler (front end, layout passes, LLVM,
PTX and ptxas all run on the CPU). Triton's interpreter, which runs the kernel tests, skips all
of that. Prints one line per compiled specialisation; exits 1 if any fails.

    python scripts/triton_compile_check.py [--dtypes float32,bfloat16,float16]
        [--paths top_k,top_p,top_k_top_p] [--arch 90]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("unset TRITON_INTERPRET: the interpreter replaces the kernels this compiles")

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernelpolicy.kernels.sampling_triton import Kernels, Sampler, jit, launch, variants
from kernelpolicy.kernels.sampling_triton.scratch import Scratch

TYPES = {
    torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16",
    torch.int32: "i32", torch.int64: "i64",
}  # fmt: skip
PATHS = {"top_k": (True, False), "top_p": (False, True), "top_k_top_p": (True, True)}


class _Recorder:
    """Stands in for a kernel: ``kernel[grid](*args, **kwargs)`` records the launch."""

    def __init__(self, name: str, kernel: Any, seen: list[Launch]) -> None:
        self.name, self.kernel, self.seen = name, kernel, seen

    def __getitem__(self, grid: object) -> Callable[..., None]:
        def launch(*args: Any, **kwargs: Any) -> None:
            self.seen.append((self.name, self.kernel, args, kwargs))

        return launch


Launch = tuple[str, Any, tuple[Any, ...], dict[str, Any]]


def _launches(dtype: torch.dtype, path: str) -> list[Launch]:
    """The kernel launches of one call at serving sizes (vocab 128256, k 50, p 0.9)."""
    seen: list[Launch] = []
    real = Kernels()
    recorders = {name: _Recorder(name, getattr(real, name), seen) for name in jit.names()}
    sampler = Sampler(kernels=real.replace(**recorders))
    has_k, has_p = PATHS[path]
    x = torch.zeros(4, 128256, dtype=dtype)
    size = variants.group_size(sampler.tuning, 128256, 50 if has_k else 0)
    w = Scratch(4, 128256, size, x.device, sampler.tuning)
    k = torch.full((4,), 50)
    p = torch.full((4,), 0.9)
    out = torch.empty(4, dtype=torch.int64)
    # rows with p may lack k (a mixed batch): the wide-row kernels launch whenever p does
    launch.launch(sampler, x, w, size, k, p, (p, p), out, (has_k, has_p, has_p))
    return seen


def _signature(
    kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[dict[str, str], dict[str, Any]]:
    names = kernel.arg_names
    values = dict(zip(names, args, strict=False)) | kwargs
    signature: dict[str, str] = {}
    constants: dict[str, Any] = {}
    for name, param in zip(names, kernel.params, strict=True):
        value = values[name]
        if param.is_constexpr:
            signature[name], constants[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + TYPES[value.dtype]
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            signature[name] = "i32" if abs(value) < 2**31 else "i64"
        else:
            signature[name] = "fp32"
    return signature, constants


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--dtypes", default="float32,bfloat16,float16")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--arch", type=int, default=90, help="compute capability (90: H100)")
    args = parser.parse_args()
    target = GPUTarget("cuda", args.arch, 32)
    done: set[str] = set()
    failed = 0
    for dtype in (getattr(torch, name) for name in args.dtypes.split(",")):
        for path in args.paths.split(","):
            for name, kernel, call_args, kwargs in _launches(dtype, path):
                options = {"num_warps": kwargs.pop("num_warps", 4)}
                signature, constants = _signature(kernel, call_args, kwargs)
                key = name + repr(sorted(signature.items())) + repr(sorted(constants.items()))
                if key in done:
                    continue
                done.add(key)
                start = time.perf_counter()
                source = ASTSource(fn=kernel, signature=signature, constexprs=constants)
                try:
                    triton.compile(source, target=target, options=options)
                    status = "ok"
                except Exception as exc:  # report every failure, then exit 1
                    failed += 1
                    status = "FAILED: " + " ".join(str(exc).split())[:600]
                seconds = time.perf_counter() - start
                print(f"{name} {TYPES[dtype]} {path} sm_{args.arch}: {status} ({seconds:.1f} s)")
    print(f"{len(done)} specialisations compiled, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
