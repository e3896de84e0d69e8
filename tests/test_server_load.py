"""20,000 mixed requests from 16 concurrent clients, a reload in the middle: zero errors."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import grpc
from google.protobuf import struct_pb2

from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2 as f2
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2_grpc as f2_grpc
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture

CLIENTS, REQUESTS = 16, 20_000
DISABLE = (
    'schema = "kernelpolicy.policy/v1"\n[[disable]]\nfeature = "sampler.top_k_top_p"\n'
    'impl = "flashinfer"\nreason = "incident 4711"\n'
)


def test_mixed_load_with_a_reload(tmp_path: Path) -> None:
    """Every request answered; each answer from one whole revision, before or after the reload."""
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    call_context = struct_pb2.Struct()
    call_context.update(
        {
            "has_generators": False,
            "has_top_k": True,
            "has_top_p": True,
            "logprobs_mode": "raw_logprobs",
        }
    )
    errors: list[str] = []
    answers: dict[str, set[tuple[int, str]]] = {"resolve": set(), "flagd": set()}
    halfway = threading.Barrier(CLIENTS + 1)
    lock = threading.Lock()

    with running_daemon(fixture("h100-sxm"), [policies], watch=False) as running:

        def client(index: int) -> None:
            with grpc.insecure_channel(running.daemon.bound[0]) as channel:
                api, flagd = pb_grpc.KernelPolicyStub(channel), f2_grpc.ServiceStub(channel)
                for n in range(REQUESTS // CLIENTS):
                    if n == REQUESTS // CLIENTS // 2:
                        halfway.wait()
                    try:
                        kind = (index + n) % 4
                        if kind == 0:
                            r = api.Resolve(
                                pb.ResolveRequest(features=["sampler.top_k_top_p"]), timeout=30
                            )
                            seen = ("resolve", (r.revision, r.decisions[0].impl))
                        elif kind == 1:
                            r = api.Resolve(
                                pb.ResolveRequest(
                                    features=["sampler.top_k_top_p"], context=call_context
                                ),
                                timeout=30,
                            )
                            seen = ("resolve", (r.revision, r.decisions[0].selected))
                        elif kind == 2:
                            s = flagd.ResolveString(
                                f2.ResolveStringRequest(flag_key="sampler.top_k_top_p"), timeout=30
                            )
                            seen = ("flagd", (int(s.metadata["revision"]), s.value))
                        else:
                            api.GetPlatform(pb.GetPlatformRequest(), timeout=30)
                            continue
                        with lock:
                            answers[seen[0]].add(seen[1])
                    except grpc.RpcError as exc:
                        with lock:
                            errors.append(f"{exc.code()}: {exc.details()}")

        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for thread in threads:
            thread.start()
        halfway.wait()
        (policies / "90-ops.toml").write_text(DISABLE)
        running.call(running.daemon.reload("load test"))
        for thread in threads:
            thread.join()

    assert errors == []
    # Revision 1 chose flashinfer, revision 2 (after the reload) triton; never a mix.
    assert answers["resolve"] == {(1, "flashinfer"), (2, "triton")}
    assert answers["flagd"] == {(1, "flashinfer"), (2, "triton")}
