"""Plain-text tables a person reads in seconds. No colour codes: output goes to logs too."""

from __future__ import annotations

from collections.abc import Sequence

from kernelpolicy.platform.model import Platform


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [headers, *rows]
    return "\n".join(
        indent + "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def platform_table(platform: Platform) -> str:
    driver = platform.driver
    stack = [f"vendor {platform.vendor}"]
    if driver.version:
        stack.append(f"driver {driver.version}")
    if driver.cuda:
        stack.append(f"CUDA {driver.cuda}")
    if driver.rocm:
        stack.append(f"ROCm {driver.rocm}")
    torch = platform.torch
    runtime = f"CUDA {torch.cuda}" if torch.cuda else f"HIP {torch.hip}" if torch.hip else "CPU"
    out = [
        "Platform  " + ", ".join(stack),
        "Torch     " + (f"{torch.version} ({runtime} build)" if torch.version else "not installed"),
        "",
    ]
    if platform.devices:
        unit = "SMs" if platform.vendor == "nvidia" else "CUs"
        rows = [
            [
                str(d.index),
                d.name,
                d.arch,
                d.capability,
                _or_dash(d.compute_units),
                "-" if d.memory_mib is None else f"{d.memory_mib / 1024:.1f} GiB",
                _or_dash(d.pci_device_id),
            ]
            for d in platform.devices
        ]
        out += ["Devices", table(["#", "name", "arch", "cap", unit, "memory", "pci id"], rows)]
    else:
        out.append("Devices   none visible")
    out += ["", "Libraries"]
    libs = sorted(platform.libraries.items())
    out.append(table(["distribution", "version"], libs) if libs else "  none of interest installed")
    if platform.env:
        out += ["", "Environment", *(f"  {k}={v}" for k, v in platform.env.items())]
    if platform.probe_errors:
        out += ["", "Probe errors (affected kernels fall back)"]
        out += [f"  - {e}" for e in platform.probe_errors]
    return "\n".join(out)
