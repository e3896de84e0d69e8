"""What the AMD probe tests share: where a fake KFD tree keeps its topology nodes, and the probe
of a fake root with nothing but AMD's sources (no NVML, no installed libraries)."""

from __future__ import annotations

from pathlib import Path

from kernelpolicy import probe

NODES = "sys/class/kfd/kfd/topology/nodes"


def amd_probe(root: Path, amdsmi=None, **env: str):  # type: ignore[no-untyped-def]
    return probe(root=root, nvml=None, amdsmi=amdsmi, environ=env, metadata=lambda name: None)
