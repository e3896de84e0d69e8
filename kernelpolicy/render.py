"""Plain-text tables a person reads in seconds. No colour codes: output goes to logs too."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from kernelpolicy.platform.model import Platform

if TYPE_CHECKING:
    from kernelpolicy.engine.model import Decision
    from kernelpolicy.engine.resolution import Resolution


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


def _why(decision: Decision, scope: str | None = None, *, no_gpu: bool = False) -> str:
    """The table's "why": the reason in a few words (``no_gpu``: the platform has none, so a
    candidate rejected for its vendor is rejected for want of a GPU)."""
    if decision.error:
        only = f", {scope} models only" if scope else ""
        return f"ERROR ({decision.error_code.value if decision.error_code else 'error'}){only}"
    if decision.reason.value == "fallback":
        rejected = [c for c in decision.candidates if c.impl != decision.impl and c.failures]
        names = ", ".join(c.impl for c in rejected)
        if _only_other_vendors(decision):
            why = "no GPU" if no_gpu else "for another vendor's GPU"
            return f"fallback: {names} rejected ({why})"
        return f"fallback: {names} rejected (below)" if names else "fallback"
    return decision.reasons[0].split(": ", 1)[-1] if decision.reasons else decision.reason.value


def in_process(decision: Decision) -> str:
    """What ``resolve().select()`` runs first, per batch range where the feature routes by
    batch: ``triton (batch 1+), flashinfer without a batch``; ``-`` for none."""
    first = decision.order[0] if decision.order else decision.impl
    if first is None:
        return "-"
    routes = sorted(decision.routes, key=lambda r: r.low)
    parts = [f"{r.order[0]} (batch {r.label})" for r in routes if r.order]
    if not parts or all(r.order[:1] == (first,) for r in routes):
        return first
    contiguous = all(
        a.high is not None and b.low == a.high + 1 for a, b in itertools.pairwise(routes)
    )
    covers = routes[0].low <= 1 and routes[-1].high is None and contiguous
    return ", ".join(parts) + f", {first} {'without a batch' if covers else 'otherwise'}"


def _candidate_hints(decision: Decision) -> list[str]:
    """What would make a rejected candidate that is not switched off acceptable
    (:attr:`~kernelpolicy.engine.model.CandidateResult.hints`)."""
    return [h for c in decision.candidates if c.switch != "off" for h in c.hints]


def _only_other_vendors(decision: Decision) -> bool:
    """The fallback was chosen because every other candidate is for another vendor (the
    ``rocm.aiter.*`` switches on an NVIDIA machine): nothing there a reader can act on."""
    rejected = [c for c in decision.candidates if not c.accepted]
    return (
        not (decision.routes or decision.dtype_rules)  # who serves which call is worth showing
        and decision.error is None
        and decision.impl is not None
        and bool(rejected)
        and not decision.warnings
        and all(any(f.kind.value in {"vendor", "no_device"} for f in c.failures) for c in rejected)
    )


def explain_table(
    resolution: Resolution,
    features: Sequence[str] | None = None,
    *,
    engines: str = "",
    sources: Mapping[str, Sequence[tuple[str, bool]]] | None = None,
) -> str:
    """A header (the fingerprint, the platform, the policy digest: equal wherever the same
    policy files are served, and their count), the summary table (what runs in-process, and
    why), ``engines`` (what each engine is told),
    then each feature's rejected candidates, hints, warnings and ``sources`` (feature ->
    (line, worth showing even where the feature's details are not)): where its values came
    from."""
    platform = resolution.platform
    device = platform.primary
    where = f"vendor {platform.vendor}"
    if device is not None:
        where += f", {device.arch}, {device.name} x{len(platform.devices)}"
    names = list(features) if features else list(resolution.decisions)
    decisions = [resolution.decisions[n] for n in names]
    scopes = {n: f.spec.model_kind for n, f in resolution.policies.features.items()}
    files = len(resolution.policies.files)
    out = [
        f"fingerprint {resolution.fingerprint}  ({where}; policy digest "
        f"{resolution.policies.digest}, {files} policy file{'' if files == 1 else 's'})",
        "",
        table(
            ["feature", "in-process", "why"],
            [
                [d.feature, in_process(d), _why(d, scopes.get(d.feature), no_gpu=device is None)]
                for d in decisions
            ],
            indent="",
        ),
    ]
    if engines:
        out.append(engines)
    for decision in decisions:
        said = (sources or {}).get(decision.feature, ())
        # A feature decided only by the vendor (rocm.* on NVIDIA) shows just what was set.
        quiet = _only_other_vendors(decision)
        lines = [line for line, notable in said if notable or not quiet]
        detail = [f"  {line}" for line in lines] if quiet else _detail(decision, lines)
        if detail:
            out += [
                "",
                f"{decision.feature} -> {decision.impl or '(none)'}",
                *dict.fromkeys(detail),
            ]
    return "\n".join(out)


def _detail(decision: Decision, sources: Sequence[str]) -> list[str]:
    """A feature's detail lines: error, rejected candidates, per-call routes, hints, warnings,
    then where its switches' values came from."""
    detail = [f"  {line}" for line in decision.reasons[1:]]
    if decision.error:
        detail.insert(0, f"  error: {decision.error}")
    detail += [f"  hint: {hint}" for hint in decision.hints]
    if not decision.error:
        detail += [f"  hint: {hint}" for hint in _candidate_hints(decision)]
    detail += [f"  warning: {w}" for w in decision.warnings]
    return detail + [f"  {line}" for line in sources]
