"""A real daemon on loopback: the kernelpolicy.v1 API, health, reflection, the client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from kernelpolicy.engine import resolve_policies
from kernelpolicy.policy import load_policies
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc
from kernelpolicy.server.client import connect
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture

TOPK = "sampler.top_k_top_p"


@pytest.fixture(scope="module")
def daemon() -> Iterator[object]:
    with running_daemon(
        fixture("mi355x"), [ROOT / "policies"], {"VLLM_ROCM_USE_AITER": "1"}, watch=False
    ) as d:
        yield d.daemon


@pytest.fixture
def stub(daemon: object) -> Iterator[pb_grpc.KernelPolicyStub]:
    with grpc.insecure_channel(daemon.bound[0]) as channel:  # type: ignore[attr-defined]
        yield pb_grpc.KernelPolicyStub(channel)


def struct(**values: object) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(values)
    return s


def test_health_and_reflection(daemon: object) -> None:
    """Health says SERVING for every service; reflection lists them."""
    with grpc.insecure_channel(daemon.bound[0]) as channel:  # type: ignore[attr-defined]
        health = health_pb2_grpc.HealthStub(channel)
        for service in (
            "",
            "kernelpolicy.v1.KernelPolicy",
            "flagd.evaluation.v1.Service",
            "flagd.evaluation.v2.Service",
        ):
            assert (
                health.Check(health_pb2.HealthCheckRequest(service=service)).status
                == health_pb2.HealthCheckResponse.SERVING
            )
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        (answer,) = reflect.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        names = {s.name for s in answer.list_services_response.service}
        assert {
            "kernelpolicy.v1.KernelPolicy",
            "flagd.evaluation.v1.Service",
            "grpc.health.v1.Health",
        } <= names


def test_get_platform(stub: pb_grpc.KernelPolicyStub) -> None:
    """GetPlatform returns the snapshot the daemon answers for."""
    snapshot = json.loads(stub.GetPlatform(pb.GetPlatformRequest()).json)
    assert snapshot["schema"] == "kernelpolicy.platform/v1"
    assert snapshot["devices"][0]["arch"] == "gfx950"


def test_resolve_with_context_and_gates(stub: pb_grpc.KernelPolicyStub) -> None:
    """Resolve gives decisions, the per-call choice for a context, and gate values."""
    response = stub.Resolve(
        pb.ResolveRequest(
            features=[TOPK],
            context=struct(
                has_generators=True, has_top_k=True, has_top_p=False,
                logprobs_mode="raw_logprobs", dtype="bfloat16", hidden_dim=2880, tokens=8,
                world_size=8, total_bytes=46080, fully_connected=True,
            ),
            gates=["allreduce_rmsnorm.one_stage"],
        )
    )  # fmt: skip
    (decision,) = response.decisions
    assert (decision.impl, decision.selected) == ("aiter", "torch")  # seeded: torch
    assert [(g.name, g.value) for g in response.gates] == [("allreduce_rmsnorm.one_stage", True)]
    assert response.revision == 1


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        pytest.param(None, "flashinfer", id="no-batch"),
        pytest.param(8, "triton", id="small"),
        pytest.param(1024, "triton", id="large"),
    ],
)
def test_resolve_routes_by_batch(
    stub: pb_grpc.KernelPolicyStub, batch: int | None, expected: str
) -> None:
    """The call's batch and dtype travel in the context: the per-call choice by batch size
    (triton at every batch; a call without a batch keeps the feature's own order, flashinfer
    first)."""
    routing = {} if batch is None else {"batch": batch, "dtype": "bfloat16"}
    context = struct(
        has_generators=False, has_top_k=True, has_top_p=True, logprobs_mode="raw_logprobs",
        **routing,
    )  # fmt: skip
    response = stub.Resolve(
        pb.ResolveRequest(
            features=[TOPK], platform_json=fixture("h100-sxm").to_json(), context=context
        )
    )
    assert (response.decisions[0].impl, response.decisions[0].selected) == ("flashinfer", expected)


def test_resolve_hypothetical_platform_and_env(stub: pb_grpc.KernelPolicyStub) -> None:
    """'What would a node like this decide': another snapshot and environment."""
    platform_json = fixture("h100-sxm").to_json()
    response = stub.Resolve(
        pb.ResolveRequest(features=[TOPK], platform_json=platform_json, hypothetical_env=True)
    )
    assert response.decisions[0].impl == "flashinfer"
    response = stub.Resolve(
        pb.ResolveRequest(
            features=[TOPK], platform_json=platform_json, env={"VLLM_USE_FLASHINFER_SAMPLER": "0"}
        )
    )
    assert response.decisions[0].impl == "triton"


@pytest.mark.parametrize(
    ("request_", "code", "details"),
    [
        pytest.param(
            pb.ResolveRequest(features=["nope"]),
            grpc.StatusCode.NOT_FOUND,
            "unknown feature 'nope'",
            id="unknown-feature",
        ),
        pytest.param(
            pb.ResolveRequest(gates=["nope"]),
            grpc.StatusCode.NOT_FOUND,
            "unknown gate 'nope'",
            id="unknown-gate",
        ),
        pytest.param(
            pb.ResolveRequest(platform_json="{"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "platform_json",
            id="bad-json",
        ),
        pytest.param(
            pb.ResolveRequest(platform_json='{"schema": "x"}'),
            grpc.StatusCode.INVALID_ARGUMENT,
            "not a valid kernelpolicy.platform/v1",
            id="bad-snapshot",
        ),
        pytest.param(
            pb.ResolveRequest(features=["x" * (2 << 20)]),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "",
            id="oversized",
        ),
    ],
)
def test_malformed_requests(
    stub: pb_grpc.KernelPolicyStub, request_: pb.ResolveRequest, code: grpc.StatusCode, details: str
) -> None:
    """Bad requests get the right status, and the daemon keeps serving."""
    with pytest.raises(grpc.RpcError) as info:
        stub.Resolve(request_)
    assert info.value.code() == code
    assert details in (info.value.details() or "")
    assert stub.Resolve(pb.ResolveRequest(features=[TOPK])).decisions[0].impl == "aiter"


def test_wrong_context_types_are_reported_per_decision(stub: pb_grpc.KernelPolicyStub) -> None:
    """A context value of the wrong type is reported in select_error, not as a failed RPC."""
    response = stub.Resolve(
        pb.ResolveRequest(features=["sampler.greedy"], context=struct(vocab_size="big"))
    )
    assert "'vocab_size' must be int, got str" in response.decisions[0].select_error


def test_explain_and_list_features(stub: pb_grpc.KernelPolicyStub) -> None:
    """Explain carries the explain document and table; ListFeatures names features and gates."""
    explain = stub.Explain(pb.ExplainRequest(features=[TOPK]))
    assert json.loads(explain.json)["decisions"][TOPK]["impl"] == "aiter"
    assert "sampler.top_k_top_p  aiter" in explain.text
    assert explain.policy_error == ""
    features = {f.name: f for f in stub.ListFeatures(pb.ListFeaturesRequest()).features}
    assert list(features[TOPK].implementations) == ["flashinfer", "aiter", "triton", "torch"]
    assert features["allreduce_rmsnorm.one_stage"].gate


def test_client_rebuilds_the_same_resolution(daemon: object) -> None:
    """connect().resolve(): the same Resolution type and fingerprint as in-process."""
    local = resolve_policies(
        fixture("mi355x"), {"VLLM_ROCM_USE_AITER": "1"}, load_policies([ROOT / "policies"])
    )
    with connect(daemon.bound[0]) as client:  # type: ignore[attr-defined]
        remote = client.resolve()
        hypothetical = client.resolve(env={})
    assert type(remote) is type(local)
    assert remote.fingerprint == local.fingerprint
    assert remote.to_dict() == local.to_dict()
    assert remote.revision == 1
    assert remote.select("sampler.greedy", vocab_size=8192) == "torch"
    assert hypothetical.decision(TOPK).impl == "torch"  # VLLM_ROCM_USE_AITER unset


def test_unix_socket(tmp_path: Path) -> None:
    """The daemon also listens on a unix socket."""
    address = f"unix:{tmp_path / 'kp.sock'}"
    with (
        running_daemon(fixture("cpu"), [ROOT / "policies"], listen=[address], watch=False),
        connect(address) as client,
    ):
        assert client.resolve().decision("topk_per_row").impl == "torch"


def test_address_in_use_is_one_clear_error(
    daemon: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second daemon on a taken port exits 2 with a line that says what to do."""
    from kernelpolicy.cli import main

    code = main(["serve", "--quiet", "--no-watch", "--listen", daemon.bound[0]])  # type: ignore[attr-defined]
    assert code == 2
    err = capsys.readouterr().err
    assert f"cannot listen on {daemon.bound[0]}" in err  # type: ignore[attr-defined]
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "given",
    [pytest.param("pol", id="relative"), pytest.param("+pol", id="relative-added-to-the-pack")],
)
def test_policy_files_are_named_absolute(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon names its policy files absolute (status, Explain, logs), however they were
    given, so that they can be found from anywhere."""
    from kernelpolicy.server.state import ServingState

    (tmp_path / "pol").mkdir()
    (tmp_path / "pol" / "my.toml").write_text(
        'schema = "kernelpolicy.policy/v1"\n[features.mine]\ndescription = "x"\n'
        'fallback = "a"\n[[features.mine.candidates]]\nimpl = "a"\nentry = "json:loads"\n'
    )
    monkeypatch.chdir(tmp_path)
    state = ServingState(fixture("cpu"), {}, [Path(given)], {})
    names = [name for name, _ in state.snapshot.sources]
    assert str(tmp_path / "pol" / "my.toml") in names
    assert all(Path(name).is_absolute() for name in names)
