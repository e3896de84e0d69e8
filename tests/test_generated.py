"""The committed gRPC stubs are what scripts/gen_protos.py generates from proto/ today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_stubs_are_current(tmp_path: Path) -> None:
    """Regenerate into a temporary directory and compare every file byte for byte."""
    out = tmp_path / "_generated"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts/gen_protos.py"), "--out", str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    committed = ROOT / "kernelpolicy/server/_generated"
    fresh = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    old = {
        p.relative_to(committed): p.read_bytes()
        for p in committed.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert fresh.keys() == old.keys(), "run: python scripts/gen_protos.py"
    stale = [str(name) for name in fresh if fresh[name] != old[name]]
    assert not stale, f"stale generated files {stale}; run: python scripts/gen_protos.py"


def test_flagd_field_numbers_match_the_published_protocol() -> None:
    """The flagd messages keep the published field numbers (a provider depends on them)."""
    from kernelpolicy.server._generated.flagd.evaluation.v1 import evaluation_pb2 as v1
    from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2 as v2

    def numbers(message: object) -> dict[str, int]:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]

    assert numbers(v1.AnyFlag) == {
        "reason": 1, "variant": 2, "bool_value": 3, "string_value": 4, "double_value": 5,
        "object_value": 6, "metadata": 7,
    }  # fmt: skip
    assert numbers(v2.ResolveStringResponse) == {
        "value": 1,
        "reason": 2,
        "variant": 3,
        "metadata": 4,
    }
    assert numbers(v1.ResolveAllResponse) == {"flags": 1, "metadata": 2}
    assert v2.ResolveStringResponse.DESCRIPTOR.fields_by_name["value"].has_presence
