"""The seventh audit's releases (vLLM 0.15.0-0.27.0 on NVIDIA, read from their release code):
real PyPI releases the knob tables lacked, for which ``kernelpolicy env`` printed ``"release":
null`` and checked none of the operator's variables (bridge/release.py left the releases to
check against empty, where :meth:`~kernelpolicy.bridge.release.MatchedRelease.reads` already
took the newest known release below).

- vLLM 0.15.0, 0.17.0, 0.18.0, 0.19.0, 0.20.1, 0.22.0 and 0.27.0 are in the tables now
  (scripts/gen_engine_tables.py), each checked against its own knobs: VLLM_ATTENTION_BACKEND,
  which 0.15.0 removed (envs.py 0.15.0 has no such variable; --attention-backend replaced it),
  is said to be ignored;
- a version between the tables' releases (vLLM 0.10.1.1, a real release; 0.32.1) has its
  variables checked against the newest release below it, said in the release note.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bridge_audit_helpers import env_json

IGNORED = "is set, but vllm {} does not define it: it is ignored"
BACKEND = {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}
V2 = {"VLLM_USE_V2_MODEL_RUNNER": "1"}
CASES = {
    # (version, environment, the release of the tables it is checked as, a warning)
    "vllm-0.15.0-in-the-tables": ("0.15.0", BACKEND, "0.15.0", IGNORED.format("0.15.0")),
    "vllm-0.17.0-in-the-tables": ("0.17.0", BACKEND, "0.17.0", IGNORED.format("0.17.0")),
    "vllm-0.18.0-in-the-tables": ("0.18.0", BACKEND, "0.18.0", IGNORED.format("0.18.0")),
    "vllm-0.19.0-in-the-tables": ("0.19.0", BACKEND, "0.19.0", IGNORED.format("0.19.0")),
    "vllm-0.20.1-in-the-tables": ("0.20.1", BACKEND, "0.20.1", IGNORED.format("0.20.1")),
    "vllm-0.22.0-in-the-tables": ("0.22.0", BACKEND, "0.22.0", IGNORED.format("0.22.0")),
    "vllm-0.27.0-in-the-tables": ("0.27.0", BACKEND, "0.27.0", IGNORED.format("0.27.0")),
    "vllm-0.10.1.1-checked-as-0.10.1": ("0.10.1.1", V2, None, IGNORED.format("0.10.1")),
    "vllm-0.32.1-checked-as-0.32.0": ("0.32.1", BACKEND, None, IGNORED.format("0.32.0")),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_every_release_has_its_variables_checked(
    case: tuple[str, dict[str, str], str | None, str], tmp_path: Path
) -> None:
    """A release of the tables is matched as itself; one between them is checked against the
    newest below it, and says so; either way a variable it ignores is said."""
    version, env, release, warning = case
    said = env_json("h100-sxm", tmp_path, "vllm", version, env)
    assert said.code == 0, said.stderr
    assert said.settings is not None
    assert said.settings["release"] == release
    assert said.warned(warning), said.stderr
    between = f"vllm {version} is not in kernelpolicy's knob tables: the variables set are checked"
    assert said.warned(between) is (release is None), said.stderr
