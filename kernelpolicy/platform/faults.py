"""The one fault boundary of the vendor probes: what fails costs only itself.

Every read the probes make of one device (an NVML handle, a KFD node, an amdsmi handle) and of
the system (driver versions, device counts) runs through :func:`attempt`. Whatever it raises,
an ``NVMLError``, an ``OSError``, a value that does not validate as a :class:`Device`, or a bug,
becomes one ``probe_errors`` entry naming the device and what went wrong, and the other devices
are read as if nothing happened.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from kernelpolicy.limits import SHOWN_PROBE_ERROR_CHARS, shown
from kernelpolicy.platform.model import PlatformValueError

T = TypeVar("T")


class DeviceFault(Exception):
    """One read of one device failed; the message names the field and the cause."""


def read(what: str, work: Callable[[], T]) -> T:
    """``work()``, with any failure re-raised as a :class:`DeviceFault` naming ``what``."""
    try:
        return work()
    except DeviceFault:
        raise
    except Exception as exc:
        raise DeviceFault(f"{what}: {describe(exc)}") from exc


def attempt(errors: list[str], where: str, work: Callable[[], T], *, then: str = "") -> T | None:
    """``work()``, or ``None`` with a probe error when it raises anything.

    Args:
        errors: The probe errors to append to.
        where: What was being read, e.g. ``"nvml: device 3"``.
        work: The read.
        then: What happens because of the failure, e.g. ``"device skipped"``.
    """
    try:
        return work()
    except Exception as exc:  # the boundary: nothing a device does may cost the other devices
        errors.append(f"{where}: {describe(exc)}" + (f"; {then}" if then else ""))
        return None


def describe(exc: BaseException) -> str:
    """One line for an exception: a validation error as its fields, anything else as its type
    (when the text does not say it) and text, cut to a readable length."""
    if isinstance(exc, PlatformValueError):
        text = f"invalid value ({exc})"
    else:
        text = str(exc).replace("\n", " ") or type(exc).__name__
        if not _is_vendor_error(exc):
            text = f"{type(exc).__name__}: {text}"
    return shown(text, SHOWN_PROBE_ERROR_CHARS)


def _is_vendor_error(exc: BaseException) -> bool:
    # NVML's and amdsmi's own errors say what they are ("GPU is lost"); others need the type.
    names = {"DeviceFault", "NVMLError", "AmdSmiException"}
    return any(cls.__name__ in names for cls in type(exc).__mro__)
