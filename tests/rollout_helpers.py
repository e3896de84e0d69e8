"""What the rollout tests share (tests/test_rollout.py, tests/test_disable_rollout*.py): a node
of a given identity, and a demo feature with a [[disable]] to stage."""

from __future__ import annotations

from pathlib import Path

from kernelpolicy.platform.model import Platform
from kernelpolicy.policy import PolicySet, load_policies
from tests.helpers import fixture

FEATURE = "demo.kernel"
FEATURE_TEXT = f"""schema = "kernelpolicy.policy/v1"
[features."{FEATURE}"]
description = "demo"
fallback = "plain"
in_process = false
[[features."{FEATURE}".candidates]]
impl = "fast"
[[features."{FEATURE}".candidates]]
impl = "plain"
"""
# Machine IDs whose buckets in the disable of demo.kernel/fast (no salt) are 2251 and 7070.
INSIDE, OUTSIDE = "c" * 32, "a" * 32


def disable(rollout: str | None, impl: str = "fast", reason: str = "bad tokens") -> str:
    line = "" if rollout is None else f"rollout = {rollout}\n"
    return (
        f'\n[[disable]]\nfeature = "{FEATURE}"\nimpl = "{impl}"\nreason = "{reason}"\n'
        f'reference = "https://example.com/4711"\n{line}'
    )


def policies(tmp_path: Path, *disables: str) -> PolicySet:
    (tmp_path / "demo.toml").write_text(FEATURE_TEXT)
    (tmp_path / "ops.toml").write_text('schema = "kernelpolicy.policy/v1"\n' + "".join(disables))
    return load_policies([tmp_path / "demo.toml", tmp_path / "ops.toml"])


def node(machine_id: str | None, base: str = "h100-sxm") -> Platform:
    """The fixture ``base`` as a node of ``machine_id`` (None: no identity at all, its GPU
    UUIDs dropped too)."""
    data = fixture(base).to_dict()
    if machine_id is None:
        for device in data["devices"]:
            device.pop("uuid", None)
    else:
        data["machine_id"] = machine_id
    return Platform.from_dict(data)
