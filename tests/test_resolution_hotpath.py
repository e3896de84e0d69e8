"""select() and gate(): per-call answers, their errors, and torch.compile."""

from __future__ import annotations

import pytest
import torch

from kernelpolicy.engine import resolve_policies
from kernelpolicy.engine.hotpath import hot_path, remember
from kernelpolicy.errors import ResolutionError
from kernelpolicy.limits import MAX_CALL_CACHE_ENTRIES
from tests.helpers import fixture, resolve_on

TOPK = "sampler.top_k_top_p"
CALL = {
    "has_generators": False,
    "has_top_k": True,
    "has_top_p": True,
    "logprobs_mode": "raw_logprobs",
}


@pytest.mark.parametrize(
    ("changes", "impl"),
    [
        pytest.param({}, "flashinfer", id="plain-call"),
        pytest.param({"has_generators": True}, "triton", id="seeded-request"),
        pytest.param({"has_top_k": False, "has_top_p": False}, "triton", id="no-k-no-p"),
        pytest.param({"has_top_k": False}, "flashinfer", id="top-p-only"),
        pytest.param({"logprobs_mode": "processed_logprobs"}, "torch", id="processed-logprobs"),
        pytest.param({"logprobs_mode": "processed_logits"}, "torch", id="processed-logits"),
        pytest.param({"logprobs_mode": "raw_logits"}, "flashinfer", id="raw-logits"),
    ],
)
def test_select_per_call(changes: dict[str, object], impl: str) -> None:
    """Seeded requests and no k/p skip flashinfer for the Triton sampler; processed logprobs
    go to torch."""
    assert resolve_on("h100-sxm").select(TOPK, **{**CALL, **changes}) == impl


def test_repeated_call_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a rule is not compiled to Python, CEL runs once per distinct context."""
    import kernelpolicy.engine.resolution as module

    calls: list[object] = []
    real = module.evaluate

    def counting(program: object, variables: dict[str, object]) -> bool:
        calls.append(program)
        return real(program, variables)

    monkeypatch.setattr(module, "evaluate", counting)
    resolution = resolve_on("h100-sxm")
    # What a feature whose rule is outside the translatable subset gets: cache and CEL only.
    resolution.select = hot_path("select", {TOPK: tuple(CALL)}, resolution._select_miss)
    calls.clear()
    for _ in range(5):
        assert resolution.select(TOPK, **CALL) == "flashinfer"
    assert len(calls) == 1
    resolution.select(TOPK, **{**CALL, "has_generators": True})
    assert len(calls) == 3  # flashinfer's rule, then triton's


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(
            lambda r: r.select("sampler.nope", **CALL),
            "unknown feature 'sampler.nope'",
            id="unknown-feature",
        ),
        pytest.param(
            lambda r: r.select(TOPK, has_generators=False),
            "missing context variable",
            id="missing-variable",
        ),
        pytest.param(
            lambda r: r.select("sampler.greedy", vocab_size="32000"),
            "'vocab_size' must be int, got str '32000'",
            id="wrong-type",
        ),
        pytest.param(
            lambda r: r.select(TOPK, **{**CALL, "logprobs_mode": None}),
            "'logprobs_mode' must be string",
            id="none-string",
        ),
        pytest.param(lambda r: r.gate("nope.gate"), "unknown gate 'nope.gate'", id="unknown-gate"),
        pytest.param(
            lambda r: r.select("sampler.greedy", vocab_size=True),
            "'vocab_size' must be int, got bool",
            id="bool-is-not-int",
        ),
        pytest.param(
            lambda r: r.select(TOPK, **{**CALL, "logprobs_mode": ["x"]}),
            "'logprobs_mode' must be string, got list",
            id="unhashable",
        ),
    ],
)
def test_select_errors(call, message: str) -> None:  # type: ignore[no-untyped-def]
    """Bad calls raise ResolutionError naming what was wrong."""
    with pytest.raises(ResolutionError, match=message.replace("(", r"\(")):
        call(resolve_on("h100-sxm"))


def test_booleans_are_taken_by_truthiness_on_the_compiled_path() -> None:
    """As in a hand-written rule, 1 counts as True where the rule is compiled to Python."""
    resolution = resolve_on("h100-sxm")
    assert resolution.select(TOPK, **{**CALL, "has_generators": 1}) == "triton"


@pytest.mark.parametrize(
    ("platform", "env"),
    [
        pytest.param("h100-sxm", {}, id="flashinfer"),
        pytest.param("mi355x", {"VLLM_ROCM_USE_AITER": "1", "SGLANG_USE_AITER": "1"}, id="aiter"),
        pytest.param("cpu", {}, id="torch-only"),
    ],
)
def test_compiled_rules_agree_with_cel(platform: str, env: dict[str, str]) -> None:
    """Every feature with a per-call rule got a compiled body, and it answers as CEL does."""
    import itertools

    resolution = resolve_on(platform, **env)
    assert set(resolution._compiled_rules()) >= {TOPK, "sampler.greedy"}
    reference = resolve_on(platform, **env)
    reference.select = hot_path(
        "select",
        {TOPK: tuple(CALL), "sampler.greedy": ("vocab_size",)},
        reference._select_miss,
    )
    modes = ["raw_logprobs", "processed_logits", "processed_logprobs", ""]
    for g, k, p, m in itertools.product([False, True], [False, True], [False, True], modes):
        ctx = {"has_generators": g, "has_top_k": k, "has_top_p": p, "logprobs_mode": m}
        assert resolution.select(TOPK, **ctx) == reference.select(TOPK, **ctx), ctx
    for vocab in (0, 8192, 16383, 16384, 151936):
        ours = resolution.select("sampler.greedy", vocab_size=vocab)
        assert ours == reference.select("sampler.greedy", vocab_size=vocab)


def test_unknown_keyword_is_a_type_error() -> None:
    """A keyword no policy declares is rejected by Python itself, naming it."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'temperature'"):
        resolve_on("h100-sxm").select(TOPK, temperature=0.7, **CALL)  # type: ignore[call-arg]


def test_select_on_an_error_decision_raises() -> None:
    """Asking for an implementation of an errored feature raises its error."""
    resolution = resolve_on("mi300x")
    with pytest.raises(ResolutionError, match="sparse_attn_indexer is required here"):
        resolution.select("sparse_attn_indexer")


def test_gate_accepts_torch_dtypes() -> None:
    """dtype may be a torch.dtype; it is compared by name."""
    resolution = resolve_on("mi355x", VLLM_ROCM_USE_AITER="1")
    ctx = {
        "hidden_dim": 4096,
        "tokens": 8,
        "world_size": 2,
        "total_bytes": 1,
        "fully_connected": True,
    }
    assert resolution.gate("allreduce_rmsnorm.one_stage", dtype=torch.bfloat16, **ctx) is True
    assert resolution.gate("allreduce_rmsnorm.one_stage", dtype=torch.float32, **ctx) is False


def test_no_graph_break_under_torch_compile() -> None:
    """select() and gate() inside torch.compile(fullgraph=True) compile without a graph break."""
    resolution = resolve_on("mi355x", VLLM_ROCM_USE_AITER="1")

    def step(x: torch.Tensor, seeded: bool) -> torch.Tensor:
        impl = resolution.select(TOPK, **{**CALL, "has_generators": seeded})
        one_stage = resolution.gate(
            "allreduce_rmsnorm.one_stage", dtype=x.dtype, hidden_dim=x.shape[-1],
            tokens=x.shape[0], world_size=8, total_bytes=x.numel() * x.element_size(),
            fully_connected=True,
        )  # fmt: skip
        y = x * 2 if impl == "aiter" else x + 1
        return y - 10 if one_stage else y

    compiled = torch.compile(step, fullgraph=True, backend="eager")
    x = torch.ones(4, 4096, dtype=torch.bfloat16)
    assert torch.equal(compiled(x, False), step(x, False))
    assert torch.equal(compiled(x, True), step(x, True))
    assert compiled(x, False)[0, 0].item() == -8.0  # aiter (x*2) and one-stage (-10)
    assert compiled(x, True)[0, 0].item() == -8.0  # torch (x+1) and one-stage (-10)


def _many_features(count: int) -> str:
    from kernelpolicy.engine.hotpath import FEATURES_PER_FUNCTION

    assert count > 2 * FEATURES_PER_FUNCTION  # split into several generated functions
    parts = ['schema = "kernelpolicy.policy/v1"']
    for i in range(count):
        parts.append(
            f'[features."f{i}"]\ndescription = "d"\nfallback = "slow"\n'
            f'context = {{ n = "int", s = "string" }}\n'
            f'[[features."f{i}".candidates]]\nimpl = "fast"\nentry = "json:loads"\n'
            f"when = 'n > {i} && s != \"x\"'\n"
            f'[[features."f{i}".candidates]]\nimpl = "slow"\nentry = "json:dumps"\n'
        )
    return "\n".join(parts)


@pytest.mark.parametrize(
    ("feature", "context", "expected"),
    [
        pytest.param("f0", {"n": 1, "s": "a"}, "fast", id="first-function-first-name"),
        pytest.param("f0", {"n": 0, "s": "a"}, "slow", id="first-function-rule-false"),
        pytest.param("f100", {"n": 101, "s": "a"}, "fast", id="second-function"),
        pytest.param("f199", {"n": 150, "s": "a"}, "slow", id="last-function"),
        pytest.param("f199", {"n": 200, "s": "x"}, "slow", id="last-function-string"),
        pytest.param("f199", {"n": 200, "s": "y"}, "fast", id="last-function-true"),
    ],
)
def test_large_sets_dispatch_by_name(
    feature: str, context: dict[str, object], expected: str
) -> None:
    """Past FEATURES_PER_FUNCTION features, select() finds each feature's generated code by
    name and answers as for a small set."""
    from kernelpolicy.policy import load_policy_text

    res = resolve_policies(fixture("h100-sxm"), {}, load_policy_text(_many_features(200)))
    assert res.select(feature, **context) == expected


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("nope", "nope", id="unknown"),
        pytest.param(["f0"], "select", id="unhashable"),
    ],
)
def test_large_sets_refuse_unknown_names(name: object, message: str) -> None:
    """An unknown or unhashable feature name is a ResolutionError on the dispatching path too."""
    from kernelpolicy.policy import load_policy_text

    res = resolve_policies(fixture("h100-sxm"), {}, load_policy_text(_many_features(200)))
    with pytest.raises(ResolutionError, match=message):
        res.select(name, n=1, s="a")


@pytest.mark.parametrize(
    ("contexts", "evaluated_again"),
    [
        pytest.param(MAX_CALL_CACHE_ENTRIES, [], id="at-limit"),
        pytest.param(MAX_CALL_CACHE_ENTRIES + 1, [1], id="limit-plus-one"),
    ],
)
def test_the_call_cache_is_bounded(contexts: int, evaluated_again: list[int]) -> None:
    """MAX_CALL_CACHE_ENTRIES distinct contexts of a feature are remembered; one more starts
    its cache over with that one (a daemon's clients choose the contexts)."""
    evaluated: list[object] = []

    def miss(
        cache: dict[object, object], name: str, key: tuple[object, ...], context: dict[str, object]
    ) -> str:
        evaluated.append(context["batch"])
        return str(remember(cache, key, "torch"))

    select = hot_path("select", {TOPK: ("batch",)}, miss)
    for batch in range(1, contexts + 1):
        select(TOPK, batch=batch)
    evaluated.clear()
    for batch in (1, contexts):  # the oldest context, the newest
        assert select(TOPK, batch=batch) == "torch"
    assert evaluated == evaluated_again
