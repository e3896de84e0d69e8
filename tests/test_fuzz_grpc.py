"""Raw-bytes fuzzing of every method of kernelpolicy.v1 and flagd v1/v2 against a real daemon.

Each example is either random bytes or a request of the method's own type built from its
descriptor (real feature and gate names, contexts with NaN, deep nesting, odd platform JSON),
possibly truncated or with a byte flipped, sent through a generic channel method with identity
serializers. Every answer must be OK or INVALID_ARGUMENT / RESOURCE_EXHAUSTED / NOT_FOUND (never
UNKNOWN or INTERNAL), and the daemon must keep serving. The example count comes from the
hypothesis profile (tests/conftest.py: "ci" by default, "release" for the long run).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import given
from hypothesis import strategies as st

from kernelpolicy.server._generated.flagd.evaluation.v1 import evaluation_pb2 as f1
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2 as f2
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture

ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.NOT_FOUND,
}
NAMES = [
    "sampler.top_k_top_p", "sampler.greedy", "allreduce_rmsnorm", "mhc", "sparse_attn_indexer",
    "topk_per_row", "allreduce_rmsnorm.one_stage",
]  # fmt: skip
CONTEXT_KEYS = [
    "has_generators", "has_top_k", "has_top_p", "logprobs_mode", "vocab_size", "tokens",
    "hidden_dim", "dtype", "world_size", "total_bytes", "fully_connected", "batch",
]  # fmt: skip
SERVICES = [
    module.DESCRIPTOR.services_by_name[name]
    for module, name in ((pb, "KernelPolicy"), (f1, "Service"), (f2, "Service"))
]


def _json_values() -> st.SearchStrategy[Any]:
    leaves = st.one_of(
        st.none(), st.booleans(), st.integers(-(2**53), 2**53),
        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
        st.sampled_from(["bfloat16", "float16", "raw_logprobs", "processed_logits"]),
    )  # fmt: skip
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(CONTEXT_KEYS) | st.text(max_size=8), inner, max_size=4
            )
        ),
        max_leaves=8,
    )


def _struct(values: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    for key, value in values.items():
        try:
            struct.update({key: value})
        except (ValueError, TypeError):  # integers too big for a double, and the like
            struct.update({key: str(value)})
    return struct


_STRUCTS = st.dictionaries(st.sampled_from(CONTEXT_KEYS) | st.text(max_size=8), _json_values(),
                           max_size=6).map(_struct)  # fmt: skip
_PLATFORM = fixture("h100-sxm").to_json(indent=None)
_STRINGS = st.one_of(
    st.sampled_from(NAMES), st.text(max_size=40), st.just(_PLATFORM),
    st.integers(0, len(_PLATFORM)).map(lambda n: _PLATFORM[:n]),
    st.integers(1, 3000).map(lambda n: "[" * n + "]" * n),
)  # fmt: skip


_ENV_NAMES = st.sampled_from(["VLLM_USE_FLASHINFER_SAMPLER", "VLLM_ROCM_USE_AITER"]) | st.text(
    max_size=8
)


def _field(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    if field.message_type is not None and field.message_type.full_name == "google.protobuf.Struct":
        return _STRUCTS
    if field.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if field.type == FieldDescriptor.TYPE_STRING:
        return _STRINGS
    return st.nothing()


def _message(descriptor: Any) -> st.SearchStrategy[bytes]:
    """Requests of ``descriptor``'s type with generated fields, serialized."""
    message_class = GetMessageClass(descriptor)
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            fields[field.name] = st.dictionaries(_ENV_NAMES, st.text(max_size=8), max_size=4)
        elif field.is_repeated:
            fields[field.name] = st.lists(_STRINGS, max_size=6)
        else:
            fields[field.name] = _field(field)

    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        message = message_class()
        for name, strategy in fields.items():
            if draw(st.booleans()):
                value = draw(strategy)
                target = getattr(message, name)
                if isinstance(value, struct_pb2.Struct):
                    target.CopyFrom(value)
                elif isinstance(value, dict):
                    target.update(value)
                elif isinstance(value, list):
                    target.extend(value)
                else:
                    setattr(message, name, value)
        return bytes(message.SerializeToString())

    return build()


def _mutated(data: bytes, how: int, where: int) -> bytes:
    if not data or how == 0:
        return data
    where %= len(data)
    if how == 1:
        return data[:where]
    return data[:where] + bytes([data[where] ^ 0xFF]) + data[where + 1 :]


def _requests(descriptor: Any) -> st.SearchStrategy[bytes]:
    structured = st.builds(_mutated, _message(descriptor), st.integers(0, 2), st.integers(0))
    return st.one_of(st.binary(max_size=512), structured)


@pytest.fixture(scope="module")
def channel() -> Iterator[grpc.Channel]:
    with (
        running_daemon(fixture("h100-sxm"), [ROOT / "policies"], watch=False) as running,
        grpc.insecure_channel(running.daemon.bound[0]) as channel,
    ):
        yield channel
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING


def _send(channel: grpc.Channel, path: str, streaming: bool, data: bytes) -> grpc.StatusCode:
    try:
        if streaming:
            stream = channel.unary_stream(path)(data, timeout=10)
            next(iter(stream), None)  # the first answer (or the error), then hang up
            stream.cancel()
        else:
            channel.unary_unary(path)(data, timeout=10)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.CANCELLED and streaming:
            return grpc.StatusCode.OK
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


@pytest.mark.parametrize("service", SERVICES, ids=[s.full_name for s in SERVICES])
def test_raw_requests_get_only_the_documented_codes(channel: grpc.Channel, service: Any) -> None:
    """No bytes a client can send to any method make the daemon answer UNKNOWN or INTERNAL,
    or stop it (one property per service; each example picks a method)."""
    methods = list(service.methods)
    requests = {method.name: _requests(method.input_type) for method in methods}

    @given(method=st.sampled_from(methods), data=st.data())
    def run(method: Any, data: st.DataObject) -> None:
        request = data.draw(requests[method.name], label="request")
        path = f"/{service.full_name}/{method.name}"
        code = _send(channel, path, method.server_streaming, request)
        assert code in ALLOWED, f"{path} answered {code.name} to {request[:200]!r}"

    run()
