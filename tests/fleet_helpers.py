"""What the fleet tests share (tests/test_fleet_diff*.py, tests/test_fleet_warnings.py): the
fixtures' names, the one staged-rollout policy they diff, and the bundled pack with its
sampler staged."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import FIXTURES, ROOT

NAMES = sorted(p.stem for p in FIXTURES.glob("*.json"))
"""The platform fixtures, by name: one node each where a test takes them as a fleet."""

_STAGED = """
schema = "kernelpolicy.policy/v1"
[features."fleet.attn"]
description = "staged"
fallback = "current"
in_process = false
[[features."fleet.attn".candidates]]
impl = "fastnv"
vendor = "nvidia"
{rollout}{slownv}[[features."fleet.attn".candidates]]
impl = "current"
"""
_SLOWNV = '[[features."fleet.attn".candidates]]\nimpl = "slownv"\nvendor = "nvidia"\n'


def staged_policy(percent: int | None, *, then_slownv: bool = False) -> str:
    """The policy of one feature, ``fleet.attn``: NVIDIA's ``fastnv`` rolled out to ``percent``
    (None: not staged), then, where ``then_slownv``, NVIDIA's ``slownv`` for every NVIDIA node,
    then ``current`` (the fallback) for any node."""
    rollout = "" if percent is None else f"rollout = {{ percent = {percent} }}\n"
    return _STAGED.format(rollout=rollout, slownv=_SLOWNV if then_slownv else "")


def rolled_out(tmp_path: Path, percent: float = 50) -> Path:
    """The bundled pack with the FlashInfer sampler rolled out to ``percent``."""
    new = tmp_path / "new"
    new.mkdir()
    for path in sorted((ROOT / "policies").glob("*.toml")):
        text = path.read_text()
        if path.name == "10-sampler.toml":
            text = text.replace(
                'impl = "flashinfer"\n',
                f'impl = "flashinfer"\nrollout = {{ percent = {percent} }}\n',
                1,
            )
        (new / path.name).write_text(text)
    return new
