#!/usr/bin/env python3
"""Cut a flashinfer-python wheel down to what its sampling kernels need, for a GPU machine
without internet (see docs/gpu.md).

Usage: python scripts/slim_flashinfer.py WHEEL OUT_DIR

Keeps every Python module (``import flashinfer`` imports most of them), the package metadata
(so ``importlib.metadata`` and kernelpolicy's probe see the distribution), and, of the JIT data,
the headers and sources the sampling module compiles: ``data/include``, the sampling sources in
``data/csrc``, the vendored CCCL (CUB) and spdlog. Everything else (generated attention and MoE
kernels, CUTLASS, cubins) stays behind. Prints the size of what it wrote.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

CSRC = {
    "sampling.cu", "renorm.cu", "flashinfer_sampling_binding.cu", "sampling_utils.h",
    "tvm_ffi_utils.h", "runtime_utils.h",
}  # fmt: skip
DATA_TREES = ("flashinfer/data/include/", "flashinfer/data/cccl/", "flashinfer/data/spdlog/")


def wanted(name: str) -> bool:
    if ".dist-info/" in name:
        return name.endswith(("METADATA", "entry_points.txt", "top_level.txt"))
    if not name.startswith("flashinfer/"):
        return False
    if name.startswith("flashinfer/data/"):
        if name.startswith("flashinfer/data/csrc/"):
            return name.count("/") == 3 and name.rsplit("/", 1)[1] in CSRC
        return name.startswith(DATA_TREES)
    return name.endswith(".py")


def main() -> None:
    wheel, out = Path(sys.argv[1]), Path(sys.argv[2])
    total = 0
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if not info.is_dir() and wanted(info.filename):
                archive.extract(info, out)
                total += info.file_size
    print(f"{out}: {total / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
