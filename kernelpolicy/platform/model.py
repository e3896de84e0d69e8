"""The Platform snapshot: what a probe found, as frozen, validated values.

The JSON form is the contract ``kernelpolicy.platform/v1`` (see DESIGN.md): required keys are
fixed, extra keys are allowed and kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kernelpolicy.errors import PlatformFileError

SCHEMA = "kernelpolicy.platform/v1"
Vendor = Literal["nvidia", "amd", "none"]

__all__ = [
    "SCHEMA",
    "Capability",
    "Device",
    "DriverInfo",
    "Platform",
    "TorchBuild",
    "Vendor",
    "load_platform",
]


class Capability(NamedTuple):
    """A compute capability (NVIDIA) or gfx major.minor (AMD) that orders itself."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> Capability:
        """Read ``"9.0"``; raise ``ValueError`` naming the expected form otherwise."""
        major, sep, minor = text.partition(".")
        if not (sep and major.isdigit() and minor.isdigit()):
            raise ValueError(f"capability must look like '9.0', got {text!r}")
        return cls(int(major), int(minor))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)


class Device(_Frozen):
    """One GPU as the worker sees it; ``index`` is the logical (visible) index."""

    index: int = Field(ge=0)
    name: str
    arch: str
    capability: str
    pci_device_id: str | None = None
    memory_mib: int | None = Field(default=None, ge=0)
    compute_units: int | None = Field(default=None, ge=0)

    @field_validator("capability")
    @classmethod
    def _capability_form(cls, value: str) -> str:
        Capability.parse(value)
        return value

    @property
    def capability_tuple(self) -> Capability:
        return Capability.parse(self.capability)


class DriverInfo(_Frozen):
    """The kernel driver and the CUDA or ROCm version it provides."""

    version: str | None = None
    cuda: str | None = None
    rocm: str | None = None


class TorchBuild(_Frozen):
    """The installed torch and the accelerator runtime it was built for."""

    version: str | None = None
    cuda: str | None = None
    hip: str | None = None


class Platform(_Frozen):
    """Everything the policies may look at about one machine."""

    schema_id: Literal["kernelpolicy.platform/v1"] = Field(
        default="kernelpolicy.platform/v1", alias="schema"
    )
    vendor: Vendor
    devices: tuple[Device, ...] = ()
    driver: DriverInfo = DriverInfo()
    torch: TorchBuild = TorchBuild()
    libraries: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    probe_errors: tuple[str, ...] = ()

    @property
    def primary(self) -> Device | None:
        """Device 0, the one a single-GPU worker runs on, or ``None`` without a GPU."""
        return self.devices[0] if self.devices else None

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready snapshot, keys as the contract names them."""
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<data>") -> Platform:
        """Validate a snapshot, raising :class:`PlatformFileError` that names each bad key."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise PlatformFileError(_describe(exc, source)) from None


def _describe(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: not a valid {SCHEMA} snapshot:"]
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"]) or "(top level)"
        lines.append(f"  {where}: {err['msg']}")
    return "\n".join(lines)


def load_platform(path: str | Path) -> Platform:
    """Read a snapshot written by ``kernelpolicy probe --json``.

    Args:
        path: The JSON file.

    Raises:
        PlatformFileError: The file is missing, is not JSON, or does not match the schema.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PlatformFileError(f"{source}: cannot read platform file: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlatformFileError(
            f"{source}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg}); "
            f"expected the output of 'kernelpolicy probe --json'"
        ) from None
    return Platform.from_dict(data, source=source)
