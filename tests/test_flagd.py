"""flagd.evaluation v1/v2 over a real daemon: values, status codes, reasons, ResolveAll."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import struct_pb2

from kernelpolicy.server._generated.flagd.evaluation.v1 import evaluation_pb2 as f1
from kernelpolicy.server._generated.flagd.evaluation.v1 import evaluation_pb2_grpc as f1_grpc
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2 as f2
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2_grpc as f2_grpc
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture

GATE = "allreduce_rmsnorm.one_stage"
GATE_CONTEXT = {
    "dtype": "bfloat16",
    "hidden_dim": 2880,
    "tokens": 8,
    "world_size": 8,
    "total_bytes": 46080,
    "fully_connected": True,
}


@pytest.fixture(scope="module")
def channel() -> Iterator[grpc.Channel]:
    env = {"VLLM_ROCM_USE_AITER": "1"}
    with (
        running_daemon(fixture("mi355x"), [ROOT / "policies"], env, watch=False) as running,
        grpc.insecure_channel(running.daemon.bound[0]) as ch,
    ):
        yield ch


def ctx(**values: object) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(values)
    return s


@pytest.mark.parametrize(
    ("module", "grpc_module"), [(f1, f1_grpc), (f2, f2_grpc)], ids=["v1", "v2"]
)
def test_string_flag(channel: grpc.Channel, module, grpc_module) -> None:  # type: ignore[no-untyped-def]
    """A feature is a string flag: the implementation, variant set, reason never STATIC."""
    stub = grpc_module.ServiceStub(channel)
    response = stub.ResolveString(module.ResolveStringRequest(flag_key="sampler.top_k_top_p"))
    assert (response.value, response.variant, response.reason) == (
        "aiter",
        "aiter",
        "TARGETING_MATCH",
    )
    assert response.metadata["revision"] == 1
    per_call = stub.ResolveString(
        module.ResolveStringRequest(
            flag_key="sampler.top_k_top_p",
            context=ctx(
                has_generators=True, has_top_k=True, has_top_p=False, logprobs_mode="raw_logprobs"
            ),
        )
    )
    assert per_call.value == "torch"


@pytest.mark.parametrize(
    ("module", "grpc_module"), [(f1, f1_grpc), (f2, f2_grpc)], ids=["v1", "v2"]
)
def test_boolean_gate(channel: grpc.Channel, module, grpc_module) -> None:  # type: ignore[no-untyped-def]
    """A gate is a boolean flag evaluated on the request context."""
    stub = grpc_module.ServiceStub(channel)
    on = stub.ResolveBoolean(
        module.ResolveBooleanRequest(flag_key=GATE, context=ctx(**GATE_CONTEXT))
    )
    off = stub.ResolveBoolean(
        module.ResolveBooleanRequest(flag_key=GATE, context=ctx(**{**GATE_CONTEXT, "tokens": 81}))
    )
    assert (on.value, on.variant, off.value, off.variant) == (True, "on", False, "off")


@pytest.mark.parametrize(
    ("call", "code"),
    [
        pytest.param(
            lambda s: s.ResolveString(f2.ResolveStringRequest(flag_key="nope")),
            grpc.StatusCode.NOT_FOUND,
            id="unknown-flag",
        ),
        pytest.param(
            lambda s: s.ResolveBoolean(f2.ResolveBooleanRequest(flag_key="mhc")),
            grpc.StatusCode.INVALID_ARGUMENT,
            id="string-flag-as-bool",
        ),
        pytest.param(
            lambda s: s.ResolveString(f2.ResolveStringRequest(flag_key=GATE)),
            grpc.StatusCode.INVALID_ARGUMENT,
            id="bool-flag-as-string",
        ),
        pytest.param(
            lambda s: s.ResolveInt(f2.ResolveIntRequest(flag_key="mhc")),
            grpc.StatusCode.INVALID_ARGUMENT,
            id="as-int",
        ),
        pytest.param(
            lambda s: s.ResolveFloat(f2.ResolveFloatRequest(flag_key="nope")),
            grpc.StatusCode.NOT_FOUND,
            id="unknown-float",
        ),
        pytest.param(
            lambda s: s.ResolveObject(f2.ResolveObjectRequest(flag_key="mhc")),
            grpc.StatusCode.INVALID_ARGUMENT,
            id="as-object",
        ),
        pytest.param(
            lambda s: s.ResolveBoolean(
                f2.ResolveBooleanRequest(flag_key=GATE, context=ctx(tokens=8))
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            id="gate-missing-context",
        ),
        pytest.param(
            lambda s: s.ResolveBoolean(
                f2.ResolveBooleanRequest(
                    flag_key=GATE, context=ctx(**{**GATE_CONTEXT, "tokens": "many"})
                )
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            id="gate-wrong-type",
        ),
        pytest.param(
            lambda s: s.ResolveString(
                f2.ResolveStringRequest(flag_key=SAMPLER, context=ctx(has_generators=True))
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            id="feature-part-of-its-context",
        ),
        pytest.param(
            lambda s: s.ResolveString(
                f2.ResolveStringRequest(
                    flag_key=SAMPLER, context=ctx(**{**SAMPLER_CONTEXT, "has_top_k": "no"})
                )
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            id="feature-bool-as-string",
        ),
    ],
)
def test_errors_as_flagd_reports_them(channel: grpc.Channel, call, code: grpc.StatusCode) -> None:  # type: ignore[no-untyped-def]
    """Unknown flags NOT_FOUND, wrong types INVALID_ARGUMENT, and the daemon keeps serving."""
    stub = f2_grpc.ServiceStub(channel)
    with pytest.raises(grpc.RpcError) as info:
        call(stub)
    assert info.value.code() == code
    assert stub.ResolveString(f2.ResolveStringRequest(flag_key="mhc")).value == "torch"


def test_not_applicable_feature_defers_to_the_callers_default() -> None:
    """A feature with no implementation here answers DISABLED with no variant."""
    with (
        running_daemon(fixture("h100-sxm"), [ROOT / "policies"], watch=False) as running,
        grpc.insecure_channel(running.daemon.bound[0]) as ch,
    ):
        response = f2_grpc.ServiceStub(ch).ResolveString(
            f2.ResolveStringRequest(flag_key="sparse_attn_indexer")
        )
    assert response.reason == "DISABLED"
    assert not response.HasField("variant")


SAMPLER = "sampler.top_k_top_p"
SAMPLER_CONTEXT = {
    "has_generators": False, "has_top_k": True, "has_top_p": True, "logprobs_mode": "raw",
}  # fmt: skip


def test_resolve_all(channel: grpc.Channel) -> None:
    """ResolveAll (v1): every feature, plus the gates whose context is given."""
    stub = f1_grpc.ServiceStub(channel)
    bare = stub.ResolveAll(f1.ResolveAllRequest())
    assert bare.flags["sampler.top_k_top_p"].string_value == "aiter"
    assert GATE not in bare.flags
    full = stub.ResolveAll(f1.ResolveAllRequest(context=ctx(**GATE_CONTEXT)))
    assert full.flags[GATE].bool_value is True
    assert all(flag.reason != "STATIC" for flag in full.flags.values())
    part = stub.ResolveAll(f1.ResolveAllRequest(context=ctx(has_generators=True)))
    assert SAMPLER not in part.flags  # a part of its context: no answer, as for an error
    assert part.flags["mhc"].string_value == "torch"
