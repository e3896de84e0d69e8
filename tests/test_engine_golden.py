"""What vLLM and SGLang are told on every bundled fixture: the golden table, and every value the
pack can emit checked against the parsing rule of the engine that reads it.

The rules are stated here from the engines' sources (no engine code is copied):
- vllm/envs.py reads VLLM_USE_FLASHINFER_SAMPLER, VLLM_USE_DEEP_GEMM, VLLM_USE_FLASHINFER_MOE_FP8
  and VLLM_USE_FLASHINFER_MOE_FP4 as ``bool(int(value))``: "true" raises ValueError.
- vllm/envs.py reads VLLM_ROCM_USE_AITER and every VLLM_ROCM_USE_AITER_* as
  ``value.lower() in ("true", "1")``: "yes" or "on" silently mean false.
- vllm/envs.py reads VLLM_FLASH_ATTN_VERSION with ``int(value)``, and
  vllm/v1/attention/backends/fa_utils.py accepts only versions 2 and 3.
- VLLM_ATTENTION_BACKEND and --attention-backend take a member name of vLLM's attention backend
  enum (vllm/v1/attention/backends/registry.py, AttentionBackendEnum).
- vllm/engine/arg_utils.py --moe-backend (from 0.24 where VLLM_USE_FLASHINFER_MOE_FP8/FP4 are gone):
  a member of vllm/config/kernel.py MoEBackend, a Literal.
- sglang python/sglang/srt/utils get_bool_env_var reads SGLANG_USE_AITER and
  SGLANG_DISABLE_AITER_GREEDY_SAMPLE as ``value.lower() in ("true", "1")``.
- sglang python/sglang/srt/server_args.py: --attention-backend in ATTENTION_BACKEND_CHOICES,
  --sampling-backend in SAMPLING_BACKEND_CHOICES, --moe-runner-backend in
  MOE_RUNNER_BACKEND_CHOICES.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernelpolicy.bridge import flag_options
from kernelpolicy.settings import parse_bool
from kernelpolicy.testing.engine_golden import golden_cases, render_golden, settings_for
from tests.helpers import bundled

GOLDEN = Path(__file__).parent / "golden/engine_settings.txt"

VLLM_BACKENDS = frozenset({
    "FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "FLASHMLA", "CUTLASS_MLA",
    "FLASHINFER_MLA", "TRITON_MLA", "ROCM_AITER_FA", "ROCM_AITER_MLA", "ROCM_AITER_UNIFIED_ATTN",
    "ROCM_ATTN",
})  # fmt: skip
SGLANG_ATTENTION = frozenset({
    "triton", "torch_native", "flex_attention", "cutlass_mla", "fa3", "fa4", "flashinfer",
    "flashmla", "trtllm_mla", "trtllm_mha", "aiter", "wave",
})  # fmt: skip
VLLM_MOE = frozenset({
    "auto", "triton", "deep_gemm", "cutlass", "flashinfer_trtllm", "flashinfer_cutlass",
    "flashinfer_cutedsl", "marlin", "aiter",
})  # fmt: skip
SGLANG_MOE = frozenset({
    "auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "flashinfer_cutlass",
    "flashinfer_mxfp4", "cutlass",
})  # fmt: skip


def _int_bool(value: str) -> bool:
    """vLLM's bool(int(value)); raises ValueError as vLLM would."""
    number = int(value)
    if number not in (0, 1):
        raise ValueError(f"{value!r}: vLLM reads any non-zero integer as true; emit 1 or 0")
    return bool(number)


def _lower_bool(value: str) -> bool:
    """value.lower() in ("true", "1"): never raises, so a value kernelpolicy reads differently
    (yes/on) would silently mean false; only 1/0 (or true/false) are unambiguous."""
    if value.lower() not in ("true", "1", "false", "0"):
        raise ValueError(f"{value!r} is read as false by the engine whatever it means")
    return value.lower() in ("true", "1")


def _fa_version(value: str) -> int:
    version = int(value)
    if version not in (2, 3):
        raise ValueError(f"flash attention version {version}: vLLM accepts 2 or 3")
    return version


def _block_size(value: str) -> int:
    """vLLM 0.10-0.11's BlockSize = Literal[1, 8, 16, 32, 64, 128] (vllm/config/cache.py)."""
    size = int(value)
    if size not in (1, 8, 16, 32, 64, 128):
        raise ValueError(f"block size {size}: vLLM accepts 1, 8, 16, 32, 64 or 128")
    return size


def _choice(choices: frozenset[str]) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(f"{value!r} is not one of {sorted(choices)}")
        return value

    return check


ENV_RULES: dict[str, dict[str, Callable[[str], object]]] = {
    "vllm": {
        "VLLM_USE_FLASHINFER_SAMPLER": _int_bool,
        "VLLM_USE_DEEP_GEMM": _int_bool,
        "VLLM_USE_FLASHINFER_MOE_FP8": _int_bool,
        "VLLM_USE_FLASHINFER_MOE_FP4": _int_bool,
        "VLLM_FLASH_ATTN_VERSION": _fa_version,
        "VLLM_ATTENTION_BACKEND": _choice(VLLM_BACKENDS),
    },
    "sglang": {
        "SGLANG_USE_AITER": _lower_bool,
        "SGLANG_DISABLE_AITER_GREEDY_SAMPLE": _lower_bool,
    },
}
FLAG_RULES: dict[str, dict[str, Callable[[str], object]]] = {
    "vllm": {
        "--attention-backend": _choice(VLLM_BACKENDS),
        "--moe-backend": _choice(VLLM_MOE),
        "--block-size": _block_size,
    },
    "sglang": {
        "--attention-backend": _choice(SGLANG_ATTENTION),
        "--sampling-backend": _choice(frozenset({"flashinfer", "pytorch"})),
        "--moe-runner-backend": _choice(SGLANG_MOE),
    },
}


def env_rule(engine: str, variable: str) -> Callable[[str], object]:
    if engine == "vllm" and variable.startswith("VLLM_ROCM_USE_AITER"):
        return _lower_bool
    return ENV_RULES[engine][variable]  # KeyError: a variable without a stated rule


def emitted() -> Iterator[tuple[str, str, str, tuple[str, ...]]]:
    """(engine, where, env-or-flag, words) for every rule of the bundled pack."""
    for feature in bundled().features.values():
        sets = [("(feature)", feature.engines)]
        sets += [(c.impl, c.engines) for c in feature.candidates]
        for impl, engines in sets:
            for engine, rules in engines.items():
                for rule in rules:
                    where = f"{feature.name}/{impl}"
                    for key, value in rule.spec.env.items():
                        yield engine, where, key, (value,)
                    for option, values in flag_options(rule.spec.flags):
                        yield engine, where, option, values


def test_golden_table_is_current() -> None:
    """tests/golden/engine_settings.txt is what the pack tells the engines today."""
    assert GOLDEN.read_text() == render_golden(bundled()), (
        "stale: run python scripts/gen_engine_golden.py and review the diff"
    )


@pytest.mark.parametrize(
    ("engine", "where", "key", "words"),
    [pytest.param(*item, id=f"{item[0]}-{item[1]}-{item[2]}") for item in emitted()],
)
def test_every_emitted_value_parses_as_the_engine_reads_it(
    engine: str, where: str, key: str, words: tuple[str, ...]
) -> None:
    """Each value is one the engine's own parser accepts, with the meaning the policy means."""
    rules = FLAG_RULES[engine] if key.startswith("--") else None
    check = rules[key] if rules is not None else env_rule(engine, key)
    assert len(words) == 1, f"{where}: {key} takes one value"
    parsed = check(words[0])
    if isinstance(parsed, bool):  # kernelpolicy's own switches must read it the same way
        assert parse_bool(key, words[0]) is parsed


@pytest.mark.parametrize(
    ("check", "value"),
    [
        pytest.param(_int_bool, "true", id="int-bool-rejects-true"),
        pytest.param(_int_bool, "2", id="int-bool-rejects-2"),
        pytest.param(_lower_bool, "yes", id="lower-bool-rejects-yes"),
        pytest.param(_fa_version, "4", id="fa-version-4"),
        pytest.param(_choice(VLLM_BACKENDS), "flash_attn", id="backend-names-are-upper-case"),
    ],
)
def test_parse_rules_reject_what_the_engines_reject(
    check: Callable[[str], object], value: str
) -> None:
    """The stated rules are not vacuous: values the engines misread fail them."""
    with pytest.raises(ValueError, match=r"."):
        check(value)


def test_done_when_flashinfer_sampler_on_h100_not_t4() -> None:
    """vLLM uses the FlashInfer sampler on the H100 with flashinfer-python, not on the T4."""
    cases = {c.fixture: c for c in golden_cases() if c.engine == "vllm" and not c.env}
    assert settings_for(cases["h100-sxm"]).env["VLLM_USE_FLASHINFER_SAMPLER"] == "1"
    assert settings_for(cases["t4"]).env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"


def test_no_fixture_gets_conflicting_settings() -> None:
    """Across every golden case, no two decisions need different values of one setting."""
    conflicts = [
        (case.title, error)
        for case in golden_cases()
        for error in settings_for(case, bundled()).errors
        if ", but " in error
    ]
    assert conflicts == []
