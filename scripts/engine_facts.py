"""The selection facts the bundled pack's engine rules depend on, read from a release's source.

Each detector takes the release's source root and returns ``{"value": ..., "file": ...}``
(``file`` None where the file does not exist in that release). The values are plain JSON; the
pack's rules name them in ``facts`` and ``kernelpolicy check`` proves them against the tables.
Used by ``scripts/engine_knobs_probe.py``; never imported by kernelpolicy.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

Fact = Callable[[Path], dict[str, Any]]


def _read(root: Path, relative: str) -> str | None:
    path = root / relative
    return path.read_text(errors="replace") if path.exists() else None


def _first(root: Path, *relatives: str) -> tuple[str | None, str | None]:
    for relative in relatives:
        text = _read(root, relative)
        if text is not None:
            return text, relative
    return None, None


def vllm_aiter_sampler(root: Path) -> dict[str, Any]:
    """The top-k/top-p sampler installs its aiter path (``forward_hip``) on ROCm: ``True``;
    ``"disabled"`` where it installs it but ``forward_hip`` hard-codes ``DISABLE_AITER_SAMPLER =
    True`` and returns ``forward_native`` (PyTorch) for every call (vLLM 0.14.0-0.22.1,
    topk_topp_sampler.py 0.14.0 :178, :191); ``False`` where it never installs it."""
    relative = "vllm/v1/sample/ops/topk_topp_sampler.py"
    text = _read(root, relative)
    installed = text is not None and re.search(r"self\.forward\s*=\s*self\.forward_hip", text)
    if not installed or text is None:
        return {"value": False, "file": relative if text is not None else None}
    body = _code(text).split("def forward_hip(", 1)[-1].split("\n    def ", 1)[0]
    disabled = re.search(r"^\s*DISABLE_AITER_SAMPLER\s*=\s*True\b", body, re.MULTILINE) and (
        re.search(r"if\s+DISABLE_AITER_SAMPLER\s*:\s*\n\s*return\s+self\.forward_native\(", body)
    )
    return {"value": "disabled" if disabled else True, "file": relative}


def vllm_aiter_allreduce_rms(root: Path) -> dict[str, Any]:
    """The compilation pass manager fuses all-reduce + RMSNorm with aiter
    (``RocmAiterAllReduceFusionPass`` under ``pass_config.fuse_allreduce_rms``, from vLLM
    0.21.0: compilation/passes/pass_manager.py 0.21.0 :145-147); before it no aiter fused
    all-reduce + RMSNorm exists and the two run apart on ROCm."""
    text, relative = _first(
        root, "vllm/compilation/passes/pass_manager.py", "vllm/compilation/pass_manager.py"
    )
    fused = text is not None and re.search(r"RocmAiterAllReduceFusionPass\(", _code(text))
    return {"value": bool(fused), "file": relative}


def vllm_flashinfer_sampler_capability(root: Path) -> dict[str, Any]:
    """The compute-capability range of ``FlashInferBackend.supports_compute_capability``, which
    the sampler consults, as ``"low-high"`` (None where the sampler does not consult it)."""
    sampler = _read(root, "vllm/v1/sample/ops/topk_topp_sampler.py") or ""
    relative = "vllm/v1/attention/backends/flashinfer.py"
    text = _read(root, relative)
    if text is None or "supports_compute_capability" not in sampler:
        return {"value": None, "file": None}
    body = text.split("def supports_compute_capability", 1)[-1].split("\n    def ", 1)[0]
    body = _code(body)
    bounds = re.findall(r"DeviceCapability\(\s*(\d+),\s*(\d+)\s*\)", body)
    value = "-".join(f"{a}.{b}" for a, b in bounds) if bounds else None
    return {"value": value, "file": relative}


def _code(text: str) -> str:
    """``text`` without its comments (a commented-out call is no call)."""
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def vllm_mhc(root: Path) -> dict[str, Any]:
    """How vLLM's MHC layer picks aiter: ``absent`` (no MHC layer), ``no_aiter`` (MHC with no
    aiter path), ``aiter_disabled`` (the aiter calls commented out, vllm-project/vllm#42810),
    ``ungated`` (aiter whenever installed and supported: no variable) or ``env_gated``
    (behind ``VLLM_ROCM_USE_AITER``)."""
    relative = "vllm/model_executor/layers/mhc.py"
    text = _read(root, relative)
    if text is None:
        return {"value": "absent", "file": None}
    code = _code(text)
    if "aiter" not in code:
        return {"value": "aiter_disabled" if "aiter" in text else "no_aiter", "file": relative}
    gated = re.search(r"rocm_aiter_ops\.is_enabled\(\)|VLLM_ROCM_USE_AITER", code)
    ungated = re.search(r"HAS_AITER_MHC\s*=\s*is_aiter_found_and_supported\(\)", code)
    return {"value": "ungated" if ungated and not gated else "env_gated", "file": relative}


def vllm_sparse_indexer_native(root: Path) -> dict[str, Any]:
    """The arch families on which the sparse attention indexer takes its aiter-op path with
    neither ``VLLM_ROCM_USE_AITER`` nor the aiter package: every ``or on_<family>()`` term of
    ``SparseAttnIndexer.forward_hip``'s condition, spelled as vLLM spells the family (``gfx11``,
    ``gfx950``); ``absent`` where the release has no such layer. ``covers`` says which GCN arch
    names each family matches: vLLM tests ``"<pattern>" in _GCN_ARCH`` (``platforms/rocm.py``),
    so ``gfx11`` covers every gfx11xx target (gfx1100-1103, gfx1150-1153).

    The op runs there without aiter (traced, vllm 0.28.0-0.33.0): ``_aiter_ops.py``
    ``register_ops_once`` registers ``rocm_aiter_sparse_attn_indexer`` alone when aiter is not
    found and ``on_gfx11()`` (0.28.0 :2038, 0.30.0 :2242, 0.33.0 :3036, ``or on_gfx950()`` from
    0.30.0), and the op (``v1/attention/ops/rocm_aiter_mla_sparse.py``) imports aiter only
    behind ``rocm_aiter_ops.is_enabled()``, ``is_rdna_aiter_enabled()`` (gfx12 only) or
    ``is_indexer_top_k_supported`` (needs ``VLLM_ROCM_USE_AITER``): its cache insert and gather
    are Triton, its logits ``fp8_mqa_logits_torch``/``fp8_paged_mqa_logits_torch``, its top-k
    ``torch.ops._C.top_k_per_row_prefill``/``_decode``."""
    relative = "vllm/model_executor/layers/sparse_attn_indexer.py"
    text = _read(root, relative)
    if text is None:
        return {"value": "absent", "file": None}
    body = _code(text).split("def forward_hip(", 1)[-1].split("\n    def ", 1)[0]
    archs = list(dict.fromkeys(re.findall(r"\bor\s+on_(gfx[0-9a-z]+)\(\)", body)))
    covers = _vllm_arch_patterns(root, archs)
    return {"value": archs, "file": relative, "covers": covers}


def _vllm_arch_patterns(root: Path, families: list[str]) -> dict[str, list[str]]:
    """What ``on_<family>()`` matches in ``platforms/rocm.py``: the substrings of the GCN arch
    name its ``_ON_<FAMILY>`` flag tests (``_ON_GFX11 = "gfx11" in _GCN_ARCH``)."""
    code = _code(_read(root, "vllm/platforms/rocm.py") or "")
    covers: dict[str, list[str]] = {}
    for family in families:
        flag = re.search(rf"^_ON_{family.upper()}\s*=\s*(.+)$", code, re.MULTILINE)
        covers[family] = re.findall(r'"(gfx[0-9a-z]+)"', flag.group(1)) if flag else []
    return covers


def vllm_moe_backend_flag(root: Path) -> dict[str, Any]:
    """``--moe-backend`` exists (``KernelConfig.moe_backend`` / ``EngineArgs.moe_backend``)."""
    relative = "vllm/engine/arg_utils.py"
    text = _read(root, relative) or ""
    return {"value": '"--moe-backend"' in text, "file": relative}


def sglang_aiter_greedy(root: Path) -> dict[str, Any]:
    """The sampler has the aiter greedy kernel and its kill switch
    ``SGLANG_DISABLE_AITER_GREEDY_SAMPLE``."""
    text, relative = _first(root, "sglang/srt/layers/sampler.py")
    found = text is not None and "SGLANG_DISABLE_AITER_GREEDY_SAMPLE" in text
    return {"value": bool(found), "file": relative}


FACTS: dict[str, dict[str, Fact]] = {
    "vllm": {
        "aiter_sampler": vllm_aiter_sampler,
        "aiter_allreduce_rms": vllm_aiter_allreduce_rms,
        "flashinfer_sampler_capability": vllm_flashinfer_sampler_capability,
        "mhc": vllm_mhc,
        "sparse_indexer_native_archs": vllm_sparse_indexer_native,
        "moe_backend_flag": vllm_moe_backend_flag,
    },
    "sglang": {
        "aiter_greedy": sglang_aiter_greedy,
    },
}
