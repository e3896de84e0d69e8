"""The seventh audit's attention finding (vLLM 0.8.5.post1-0.15.1 on NVIDIA and AMD, read from
their release code): checked with the real ``kernelpolicy env --json``.

vLLM <= 0.14.1 reads the operator's VLLM_ATTENTION_BACKEND and runs the backend it names
(attention/selector.py 0.12.0 :126-148, 0.8.5.post1 :134-148), and 0.13.0-0.14.1 set the backend
from it over --attention-backend too (config/attention.py 0.13.0 and 0.14.1 :73-93,
AttentionConfig.__post_init__ ``_set_from_env_if_set("backend", ...)``). Where the rule chosen
sends no VLLM_ATTENTION_BACKEND (vLLM's default runs the choice, or --attention-backend pins
it), kernelpolicy kept the variable without a word and explain named a backend vLLM does not
run: it now warns where the value names none of the chosen implementation's backends. Where
kernelpolicy sends the variable itself (<= 0.12 on Hopper), the warning that it is kept stays;
from 0.15.0 vLLM does not define it, which the variable warning says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.bridge import Status
from tests.bridge_audit_helpers import Case, assert_said, env_json

ATTN = "attention.backend"
MLA = "attention.mla"
VAR = "VLLM_ATTENTION_BACKEND"
RUNS = "reads it: it runs the backend that names"
CASES = {
    "vllm-0.12.0-a100-flashinfer-over-fa2-default": Case(
        "a100-fi-0.7.2.post1", "vllm", "0.12.0", env={VAR: "FLASHINFER"}, feature=ATTN,
        status=Status.DEFAULT, warning=f"vllm 0.12.0 {RUNS}, not flash_attn_2",
    ),
    "vllm-0.8.5.post1-a100-flashinfer-over-fa2-default": Case(
        "a100", "vllm", "0.8.5.post1", env={VAR: "FLASHINFER"}, feature=ATTN,
        status=Status.DEFAULT, warning=RUNS,
    ),
    "vllm-0.13.0-h100-flashinfer-over-fa3-default": Case(
        "h100-sxm", "vllm", "0.13.0", env={VAR: "FLASHINFER"}, feature=ATTN,
        status=Status.DEFAULT, warning=f"{RUNS}, not flash_attn_3",
    ),
    "vllm-0.11.0-b200-flash-attn-over-flashinfer-default": Case(
        "b200", "vllm", "0.11.0", env={VAR: "FLASH_ATTN"}, feature=ATTN,
        status=Status.DEFAULT, warning=f"{RUNS}, not flashinfer",
    ),
    "vllm-0.14.1-h100-triton-mla-over-the-flashmla-pin": Case(
        "h100-sxm", "vllm", "0.14.1", model_kind="mla", env={VAR: "TRITON_MLA"}, feature=MLA,
        flags=("--attention-backend", "FLASHMLA"),
        warning="(over the --attention-backend FLASHMLA kernelpolicy sends), not flashmla",
    ),
    "vllm-0.12.0-mi300x-flashinfer-over-rocm-triton": Case(
        "mi300x", "vllm", "0.12.0", env={VAR: "FLASHINFER"}, feature=ATTN,
        status=Status.DEFAULT, warning=f"{RUNS}, not rocm_triton",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_the_operators_backend_variable_is_said_where_it_overrides(
    case: Case, tmp_path: Path
) -> None:
    """Where the operator's VLLM_ATTENTION_BACKEND names another backend than kernelpolicy's
    choice and the release reads it, a warning says vLLM runs that one."""
    said = assert_said(case, tmp_path)
    assert said.settings is not None
    assert VAR not in said.settings["kept"], said.settings["kept"]


@pytest.mark.parametrize(
    ("machine", "version", "value", "kind", "other"),
    [
        pytest.param("a100-fi-0.7.2.post1", "0.12.0", "FLASH_ATTN", "mha", "",
                     id="vllm-0.12.0-a100-agrees"),
        pytest.param("h100-sxm", "0.13.0", "flash_attn", "mha", "",
                     id="vllm-0.13.0-h100-agrees-any-case"),
        pytest.param("h100-sxm", "0.14.1", "FLASHMLA", "mla", "", id="vllm-0.14.1-mla-agrees"),
        pytest.param("a100-fi-0.7.2.post1", "0.15.1", "FLASHINFER", "mha",
                     "does not define it: it is ignored", id="vllm-0.15.1-not-read"),
        pytest.param("h100-sxm", "0.12.0", "FLASHINFER", "mha",
                     "is set in the environment and kept", id="vllm-0.12.0-h100-sent-and-kept"),
    ],
)  # fmt: skip
def test_no_override_warning_where_it_agrees_or_is_not_read(
    machine: str, version: str, value: str, kind: str, other: str, tmp_path: Path
) -> None:
    """Unchanged: a value that names the chosen backend, a release that does not read the
    variable, and one that is sent it by kernelpolicy (kept, with its own warning) get no
    override warning."""
    said = env_json(machine, tmp_path, "vllm", version, {VAR: value}, kind)
    assert said.code == 0, said.stderr
    assert not said.warned(RUNS), said.stderr
    if other:
        assert said.warned(other), said.stderr
