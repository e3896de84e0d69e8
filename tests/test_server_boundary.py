"""The daemon's request boundary: malformed requests, every request limit, the answer cache."""

from __future__ import annotations

import io
import itertools
import json
import re
import tempfile
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from kernelpolicy.limits import (
    MAX_ANSWER_CACHE_BYTES,
    MAX_ANSWER_CACHE_ENTRIES,
    MAX_CONTEXT_DEPTH,
    MAX_CONTEXT_ENTRIES,
    MAX_ENV_VALUE_CHARS,
    MAX_FLAG_KEY_CHARS,
    MAX_REQUEST_BYTES,
    MAX_REQUEST_ENV_ENTRIES,
    MAX_REQUEST_FEATURES,
    MAX_TCP_REQUEST_BYTES,
    SHOWN_ERROR_CHARS,
)
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2 as f2
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2_grpc as f2_grpc
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc
from kernelpolicy.server.state import AnswerCache, _key_bytes
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture

INVALID = grpc.StatusCode.INVALID_ARGUMENT
CLASS_NAME = re.compile(r"\b\w+(Error|Exception)\b|Traceback|<class")


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Any, io.StringIO]]:
    log = io.StringIO()
    unix = f"unix:{tempfile.mkdtemp(prefix='kp-', dir='/tmp')}/kp.sock"
    with running_daemon(
        fixture("h100-sxm"), [ROOT / "policies"], watch=False, log_format="json", log_stream=log,
        listen=("127.0.0.1:0", unix),
    ) as running:  # fmt: skip
        yield running.daemon, log


@pytest.fixture
def channel(served: tuple[Any, io.StringIO]) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(served[0].bound[0]) as channel:
        yield channel


def nested(depth: int) -> struct_pb2.Struct:
    """A context nested ``depth`` levels deep (1: a flat one)."""
    inner: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        inner = {"x": inner}
    context = struct_pb2.Struct()
    context.update(inner)
    return context


def flat(entries: int) -> struct_pb2.Struct:
    context = struct_pb2.Struct()
    context.update({f"k{i}": i for i in range(entries)})
    return context


def number(value: float) -> struct_pb2.Struct:
    context = struct_pb2.Struct()
    context.fields["tokens"].number_value = value
    return context


def sized(total: int) -> pb.ResolveRequest:
    """A valid Resolve request of exactly ``total`` bytes (the platform JSON padded)."""
    platform = fixture("cpu").to_json(indent=None)
    request = pb.ResolveRequest(features=["topk_per_row"], platform_json=platform)
    pad = total - request.ByteSize()
    for _ in range(4):  # the string's length prefix may grow by a byte or two as it is padded
        request.platform_json = " " * pad + platform
        if request.ByteSize() == total:
            return request
        pad -= request.ByteSize() - total
    raise AssertionError(f"no Resolve request of exactly {total} bytes (a length prefix's edge)")


def call(channel: grpc.Channel, method: str, request: Any) -> tuple[grpc.StatusCode, str]:
    stub = pb_grpc.KernelPolicyStub(channel)
    try:
        getattr(stub, method)(request, timeout=30)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


SWITCH = "VLLM_USE_FLASHINFER_SAMPLER"
ENV_FULL = {f"V{i}": "1" for i in range(MAX_REQUEST_ENV_ENTRIES)}
DEEP_JSON = "[" * 100_000 + "]" * 100_000

CASES = [
    pytest.param("Resolve", pb.ResolveRequest(context=number(float("nan"))), INVALID,
                 "context.tokens: nan is not a finite number", id="nan-in-context"),
    pytest.param("Resolve", pb.ResolveRequest(context=number(float("inf"))), INVALID,
                 "not a finite number", id="inf-in-context"),
    pytest.param("Resolve", pb.ResolveRequest(platform_json=DEEP_JSON), INVALID,
                 "MAX_NESTING_DEPTH", id="deep-platform-json"),
    pytest.param("Explain", pb.ExplainRequest(platform_json='{"schema": 1e999999}'), INVALID,
                 "platform_json", id="huge-number-platform-json"),
    pytest.param("Resolve", pb.ResolveRequest(context=nested(MAX_CONTEXT_DEPTH)),
                 grpc.StatusCode.OK, "", id="context-depth-at-limit"),
    pytest.param("Resolve", pb.ResolveRequest(context=nested(MAX_CONTEXT_DEPTH + 1)), INVALID,
                 "MAX_CONTEXT_DEPTH", id="context-depth-over-limit"),
    pytest.param("Resolve", pb.ResolveRequest(context=flat(MAX_CONTEXT_ENTRIES)),
                 grpc.StatusCode.OK, "", id="context-entries-at-limit"),
    pytest.param("Resolve", pb.ResolveRequest(context=flat(MAX_CONTEXT_ENTRIES + 1)), INVALID,
                 "MAX_CONTEXT_ENTRIES", id="context-entries-over-limit"),
    pytest.param("Resolve",
                 pb.ResolveRequest(features=[f"f{i}" for i in range(MAX_REQUEST_FEATURES)]),
                 grpc.StatusCode.NOT_FOUND, "unknown feature 'f0'", id="features-at-limit"),
    pytest.param("Resolve",
                 pb.ResolveRequest(features=[f"f{i}" for i in range(MAX_REQUEST_FEATURES + 1)]),
                 INVALID, "MAX_REQUEST_FEATURES (256)", id="features-over-limit"),
    pytest.param("Explain",
                 pb.ExplainRequest(features=[f"f{i}" for i in range(MAX_REQUEST_FEATURES + 1)]),
                 INVALID, "MAX_REQUEST_FEATURES", id="explain-features-over-limit"),
    pytest.param("Resolve", pb.ResolveRequest(features=["mhc"] * 40_000), grpc.StatusCode.OK,
                 "", id="duplicates-dropped-first"),
    pytest.param("Resolve", pb.ResolveRequest(gates=["g"] * 3 + [f"g{i}" for i in range(300)]),
                 INVALID, "gates: 301 distinct names", id="gates-over-limit"),
    pytest.param("Resolve", pb.ResolveRequest(features=["mhc"], env=ENV_FULL),
                 grpc.StatusCode.OK, "", id="env-entries-at-limit"),
    pytest.param("Resolve", pb.ResolveRequest(features=["mhc"], env={**ENV_FULL, "X": "1"}),
                 INVALID, "MAX_REQUEST_ENV_ENTRIES", id="env-entries-over-limit"),
    pytest.param("Explain", pb.ExplainRequest(env={SWITCH: "x" * MAX_ENV_VALUE_CHARS}),
                 grpc.StatusCode.OK, "", id="env-value-at-limit"),
    pytest.param("Explain",
                 pb.ExplainRequest(env={SWITCH: "x" * (MAX_ENV_VALUE_CHARS + 1)}),
                 INVALID, "MAX_ENV_VALUE_CHARS", id="env-value-over-limit"),
    pytest.param("Explain",
                 pb.ExplainRequest(env={"VLLM_USE_FLASHINFER_SAMPLER": "x" * 200_000}),
                 INVALID, "200000 characters, over MAX_ENV_VALUE_CHARS", id="env-value-200kb"),
    pytest.param("Resolve", sized(MAX_TCP_REQUEST_BYTES), grpc.StatusCode.OK, "",
                 id="request-bytes-at-limit"),
    pytest.param("Resolve", sized(MAX_TCP_REQUEST_BYTES + 1),
                 grpc.StatusCode.RESOURCE_EXHAUSTED, "", id="request-bytes-over-limit"),
    pytest.param("Resolve", pb.ResolveRequest(features=["z" * 200_000]),
                 grpc.StatusCode.NOT_FOUND, "unknown feature", id="long-unknown-name-cut"),
]  # fmt: skip
"""Over TCP (``MAX_TCP_REQUEST_BYTES``); the unix socket's own limits are in UNIX_CASES."""

UNIX_CASES = [
    pytest.param("Explain",
                 pb.ExplainRequest(env={"VLLM_USE_FLASHINFER_SAMPLER": "x" * 500_000}),
                 INVALID, "500000 characters, over MAX_ENV_VALUE_CHARS", id="env-value-500kb"),
    pytest.param("Resolve", sized(MAX_REQUEST_BYTES), grpc.StatusCode.OK, "",
                 id="request-bytes-at-limit"),
    pytest.param("Resolve", sized(MAX_REQUEST_BYTES + 1), grpc.StatusCode.RESOURCE_EXHAUSTED,
                 "", id="request-bytes-over-limit"),
    pytest.param("Resolve", pb.ResolveRequest(features=["z" * 900_000]),
                 grpc.StatusCode.NOT_FOUND, "unknown feature", id="long-unknown-name-cut"),
]  # fmt: skip


@pytest.mark.parametrize(("method", "request_", "code", "details"), CASES)
def test_requests_at_and_over_each_limit(
    channel: grpc.Channel, method: str, request_: Any, code: grpc.StatusCode, details: str
) -> None:
    """Each limit: the request at the limit is served, one past it is refused, naming it."""
    got, text = call(channel, method, request_)
    assert (got, details in text) == (code, True), text[:300]
    assert len(text) <= SHOWN_ERROR_CHARS + 40
    assert not CLASS_NAME.search(text), text
    assert call(channel, "ListFeatures", pb.ListFeaturesRequest())[0] == grpc.StatusCode.OK


@pytest.mark.parametrize(("method", "request_", "code", "details"), UNIX_CASES)
def test_unix_socket_takes_bigger_requests(
    served: tuple[Any, io.StringIO],
    method: str,
    request_: Any,
    code: grpc.StatusCode,
    details: str,
) -> None:
    """The workers' unix socket takes requests up to MAX_REQUEST_BYTES (TCP: a quarter of it)."""
    with grpc.insecure_channel(served[0].bound[1]) as channel:
        got, text = call(channel, method, request_)
    assert (got, details in text) == (code, True), text[:300]
    assert len(text) <= SHOWN_ERROR_CHARS + 40
    assert not CLASS_NAME.search(text), text


def test_duplicate_features_are_answered_once(channel: grpc.Channel) -> None:
    """features=["mhc"]*20000 is one decision, not 20,000."""
    response = pb_grpc.KernelPolicyStub(channel).Resolve(
        pb.ResolveRequest(features=["mhc", "sampler.greedy"] * 10_000)
    )
    assert [d.feature for d in response.decisions] == ["mhc", "sampler.greedy"]


METHODS = [
    ("kernelpolicy.v1.KernelPolicy", name, "kernelpolicy.v1." + kind)
    for name, kind in [
        ("GetPlatform", "GetPlatformRequest"), ("Resolve", "ResolveRequest"),
        ("Explain", "ExplainRequest"), ("ListFeatures", "ListFeaturesRequest"),
    ]
] + [
    ("flagd.evaluation.v2.Service", "ResolveString", "flagd.evaluation.v2.ResolveStringRequest"),
    ("flagd.evaluation.v1.Service", "ResolveAll", "flagd.evaluation.v1.ResolveAllRequest"),
]  # fmt: skip


@pytest.mark.parametrize(("service", "method", "type_name"), METHODS)
@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xff\xff\xff", id="truncated-varint"),
        pytest.param(b"\x0a\x05ab", id="short-length"),
        pytest.param(b"\x12" + b"\x12\x7f" * 2, id="bad-submessage"),
        pytest.param(b"\x0a\x02\xc3\x28", id="invalid-utf8"),
    ],
)
def test_undecodable_requests(
    served: tuple[Any, io.StringIO], service: str, method: str, type_name: str, data: bytes
) -> None:
    """Bytes that are no message of the method's type: INVALID_ARGUMENT naming the type, logged."""
    daemon, log = served
    if data.startswith(b"\x0a\x02") and method in {"GetPlatform", "ListFeatures"}:
        data = b"\x0a\x02\xc3"  # field 1 is no string there: a truncated one instead
    with grpc.insecure_channel(daemon.bound[0]) as channel:
        raw = channel.unary_unary(
            f"/{service}/{method}", request_serializer=None, response_deserializer=None
        )
        with pytest.raises(grpc.RpcError) as info:
            raw(data, timeout=30)
    code, details = info.value.code(), info.value.details() or ""
    assert code == INVALID, details
    assert details == f"the request is not a valid {type_name} message"
    assert f'"detail": "{details}"' in log.getvalue()
    assert '"event": "kernelpolicy.request.rejected"' in log.getvalue()


def test_a_bug_in_a_handler_is_internal_and_logged(
    served: tuple[Any, io.StringIO], channel: grpc.Channel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected exception: INTERNAL with no Python detail, the traceback in the log."""
    from kernelpolicy.server import services

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("planted")

    monkeypatch.setattr(services, "resolve_response", broken)
    code, details = call(channel, "Resolve", pb.ResolveRequest(gates=["x"]))
    assert (code, details) == (grpc.StatusCode.INTERNAL, "internal error; the daemon logged it")
    assert "ZeroDivisionError: planted" in served[1].getvalue()


@pytest.mark.parametrize(
    ("extra", "code", "details"),
    [
        pytest.param(0, grpc.StatusCode.NOT_FOUND, "not found", id="at-limit"),
        pytest.param(1, INVALID, "over MAX_FLAG_KEY_CHARS (256)", id="over-limit"),
        pytest.param(200_000, INVALID, "200256 characters", id="200kb"),
    ],
)
def test_flagd_flag_key_limit(
    channel: grpc.Channel, extra: int, code: grpc.StatusCode, details: str
) -> None:
    """MAX_FLAG_KEY_CHARS: a longer key cannot name a flag, and is never echoed whole."""
    with pytest.raises(grpc.RpcError) as info:
        f2_grpc.ServiceStub(channel).ResolveString(
            f2.ResolveStringRequest(flag_key="k" * (MAX_FLAG_KEY_CHARS + extra))
        )
    assert info.value.code() == code
    assert details in (info.value.details() or "")
    assert len(info.value.details() or "") <= SHOWN_ERROR_CHARS + 40


def test_cache_attack_stays_bounded(served: tuple[Any, io.StringIO]) -> None:
    """The review's attack: 5 x features=["mhc"]*40000 plus ~2,000 distinct small requests."""
    daemon, _ = served
    with grpc.insecure_channel(daemon.bound[0]) as channel:
        stub = pb_grpc.KernelPolicyStub(channel)
        names = [f.name for f in stub.ListFeatures(pb.ListFeaturesRequest()).features
                 if not f.gate]  # fmt: skip
        for _ in range(5):
            stub.Resolve(pb.ResolveRequest(features=["mhc"] * 40_000))
        asked = 0
        for size in range(1, len(names) + 1):
            for combination in itertools.islice(itertools.permutations(names, size), 2000 - asked):
                stub.Resolve(pb.ResolveRequest(features=list(combination)))
                asked += 1
    cache = daemon.state.snapshot.cache
    assert asked > MAX_ANSWER_CACHE_ENTRIES
    assert len(cache) == MAX_ANSWER_CACHE_ENTRIES
    assert cache.bytes <= MAX_ANSWER_CACHE_BYTES
    assert cache.get(("resolve", ("mhc",))) is None  # the oldest went first


def test_answer_cache_entries_at_and_over_the_limit() -> None:
    """MAX_ANSWER_CACHE_ENTRIES answers are kept; one more drops the least recently used."""
    cache = AnswerCache()
    for i in range(MAX_ANSWER_CACHE_ENTRIES):
        cache.put(i, b"x")
    assert len(cache) == MAX_ANSWER_CACHE_ENTRIES
    assert cache.get(0) == b"x"  # now the most recently used
    cache.put("one more", b"x")
    assert len(cache) == MAX_ANSWER_CACHE_ENTRIES
    assert cache.get(1) is None
    assert cache.get(0) == b"x"


def test_answer_cache_bytes_at_and_over_the_limit() -> None:
    """MAX_ANSWER_CACHE_BYTES of keys and answers are kept; one byte more drops the oldest."""
    cache = AnswerCache()
    half = MAX_ANSWER_CACHE_BYTES // 2
    cache.put("a", b"x" * (half - _key_bytes("a")))
    cache.put("b", b"x" * (MAX_ANSWER_CACHE_BYTES - half - _key_bytes("b")))
    assert (len(cache), cache.bytes) == (2, MAX_ANSWER_CACHE_BYTES)
    cache.put("c", b"")
    assert cache.get("a") is None
    assert cache.bytes <= MAX_ANSWER_CACHE_BYTES
    cache.put("huge", b"x" * MAX_ANSWER_CACHE_BYTES)  # larger than the budget: not kept
    assert cache.get("huge") is None
    assert cache.get("b") is not None


def test_rejections_are_logged_with_their_limit(served: tuple[Any, io.StringIO]) -> None:
    """A refused request leaves one warning line naming the method and the limit."""
    daemon, log = served
    with grpc.insecure_channel(daemon.bound[0]) as channel:
        call(channel, "Resolve", pb.ResolveRequest(context=flat(MAX_CONTEXT_ENTRIES + 1)))
    lines = [json.loads(line) for line in log.getvalue().splitlines() if "MAX_CONTEXT_ENTRIES"
             in line]  # fmt: skip
    assert lines
    assert lines[-1]["level"] == "warning"
    assert lines[-1]["method"] == "kernelpolicy.v1.KernelPolicy/Resolve"


def test_a_500kb_node_env_value_is_not_echoed() -> None:
    """A 500 KB value of a variable the policies read, in the daemon's own environment: the
    answers carry it cut (the review saw a 14 MB Explain answer)."""
    env = {SWITCH: "x" * 500_000}
    with (
        running_daemon(fixture("h100-sxm"), [ROOT / "policies"], env, watch=False) as running,
        grpc.insecure_channel(running.daemon.bound[0]) as channel,
    ):
        stub = pb_grpc.KernelPolicyStub(channel)
        explain = stub.Explain(pb.ExplainRequest())
        inputs = stub.Resolve(pb.ResolveRequest(include_inputs=True))
        platform = stub.GetPlatform(pb.GetPlatformRequest())
    assert "x" * 1000 not in explain.json + explain.text + explain.policy_error
    assert "x" * 1000 not in str(inputs) + platform.json
    assert explain.ByteSize() < 100_000
