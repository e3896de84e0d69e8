"""The public surface: a curated __all__ and an import that stays light."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import kernelpolicy

HEAVY = ("torch", "grpc", "flashinfer", "aiter", "pynvml", "amdsmi", "cel", "structlog")


def test_import_loads_no_heavy_module() -> None:
    """`import kernelpolicy` imports none of torch, grpc, flashinfer, aiter or the probes."""
    code = (
        "import sys, json, kernelpolicy; "
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert json.loads(out.stdout) == []


def test_probe_loads_no_accelerator_library() -> None:
    """probe() reads library versions without importing torch, flashinfer or aiter."""
    code = (
        "import sys, json, kernelpolicy; kernelpolicy.probe(); "
        "print(json.dumps([m for m in ('torch', 'flashinfer', 'aiter', 'grpc') "
        "if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert json.loads(out.stdout) == []


def test_all_names_resolve() -> None:
    """Every name in __all__ is importable from the package."""
    for name in kernelpolicy.__all__:
        assert getattr(kernelpolicy, name) is not None


def test_all_is_the_curated_list() -> None:
    """__all__ changes only on purpose: this list is the public API."""
    assert sorted(kernelpolicy.__all__) == sorted(
        [
            "Capability", "DaemonError", "Decision", "Device", "DriverInfo", "KernelPolicyError",
            "Platform",
            "PlatformFileError", "PolicyError", "PolicySet", "Reason", "Resolution",
            "ResolutionError", "SettingsError", "TorchBuild", "UntrustedFileError", "VersionError",
            "__version__",
            "connect", "load_platform", "load_policies", "parse_version", "probe", "resolve",
        ]
    )  # fmt: skip


def test_all_matches_the_lazy_exports() -> None:
    """Every exported name has a lazy loader, and nothing loads that is not exported."""
    assert sorted(kernelpolicy.__all__) == sorted([*kernelpolicy._EXPORTS, "__version__"])


def test_errors_share_one_root() -> None:
    """Every public exception derives from KernelPolicyError."""
    for name in (
        "PlatformFileError",
        "PolicyError",
        "ResolutionError",
        "SettingsError",
        "UntrustedFileError",
        "VersionError",
    ):
        assert issubclass(getattr(kernelpolicy, name), kernelpolicy.KernelPolicyError)


def test_unknown_attribute_is_an_attribute_error() -> None:
    """A typo gets AttributeError naming the attribute."""
    with pytest.raises(AttributeError, match="resolv"):
        kernelpolicy.resolv  # type: ignore[attr-defined]  # noqa: B018
