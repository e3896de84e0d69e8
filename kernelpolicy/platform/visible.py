"""Which physical GPUs a worker sees, from ``CUDA_VISIBLE_DEVICES`` and its ROCm cousins.

NVML and the KFD topology number devices physically; the CUDA and HIP runtimes number only the
visible ones, in the order the variable lists them. The rules follow the CUDA runtime: entries
are indices or UUIDs (a unique prefix is enough), and the list stops at the first entry that
names no device. An empty value hides every device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kernelpolicy.limits import shown


@dataclass(frozen=True)
class Visibility:
    """The physical indices visible, in logical order, and what could not be honoured."""

    physical: tuple[int, ...]
    errors: tuple[str, ...] = field(default=())


def select_visible(variable: str, value: str | None, uuids: Sequence[str | None]) -> Visibility:
    """Apply one visibility variable to a list of physical devices.

    Args:
        variable: The variable's name, for messages.
        value: Its value, or ``None`` when unset (everything visible).
        uuids: The UUID of each physical device (``"GPU-..."``), ``None`` where unknown.

    Returns:
        The visible physical indices; an entry that names no device ends the list, as in CUDA,
        and is reported.
    """
    count = len(uuids)
    if value is None:
        return Visibility(tuple(range(count)))
    chosen: list[int] = []
    for raw in value.split(","):
        token = raw.strip()
        if not token:
            continue
        index = _match(token, uuids)
        if index is None:
            return Visibility(
                tuple(chosen),
                (
                    f"{variable}={shown(value)!r}: entry {shown(token)!r} names no device "
                    f"(have {count}); devices from it on are hidden, as the CUDA/HIP runtime does",
                ),
            )
        if index in chosen:
            return Visibility(
                tuple(chosen),
                (
                    f"{variable}={shown(value)!r}: device {shown(token)!r} listed twice; "
                    "the list ends there",
                ),
            )
        chosen.append(index)
    return Visibility(tuple(chosen))


def _match(token: str, uuids: Sequence[str | None]) -> int | None:
    # ASCII digits only ('²'.isdigit() holds, and int() refuses it), and no more of them than
    # an index can have (5,000 digits are over int()'s limit): anything else names no device.
    if token.isascii() and token.isdigit():
        significant = token.lstrip("0") or "0"
        if len(significant) > 9:
            return None
        index = int(significant)
        return index if index < len(uuids) else None
    wanted = token.lower()
    hits = [i for i, uuid in enumerate(uuids) if uuid and uuid.lower().startswith(wanted)]
    return hits[0] if len(hits) == 1 else None
