"""/metrics: what the daemon exposes, counted as it happens, and valid for promtool."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kernelpolicy.api import resolve
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc
from kernelpolicy.server.metrics import ResolutionCollector
from kernelpolicy.testing.daemon import RunningDaemon, running_daemon
from tests.helpers import ROOT, fixture, promtool_check_metrics
from tests.http_helpers import call, post
from tests.metrics_helpers import samples

RESOLVE = "/kernelpolicy.v1.KernelPolicy/Resolve"
WATCH = "/kernelpolicy.v1.KernelPolicy/Watch"


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    return tmp_path / "policies"


@pytest.fixture
def running(policies: Path) -> Iterator[RunningDaemon]:
    with running_daemon(fixture("mi300x"), [policies], watch=False, http="127.0.0.1:0") as d:
        yield d


@pytest.fixture
def daemon(running: RunningDaemon) -> Any:
    return running.daemon


def scrape(daemon: Any) -> str:
    reply = call(daemon.fleet.url, "GET", "/metrics")
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    return reply.body.decode()


def test_decision_info_per_feature(daemon: Any) -> None:
    """One info sample per feature with the implementation and the reason; revision 1."""
    text = scrape(daemon)
    resolution = daemon.state.snapshot.resolution
    for feature, decision in resolution.decisions.items():
        labels = {
            "feature": feature, "impl": decision.impl or "", "reason": decision.reason.value,
            "error_code": decision.error_code.value if decision.error_code else "",
        }  # fmt: skip
        assert value(text, "kernelpolicy_decision_info", **labels) == 1.0, feature
    assert value(text, "kernelpolicy_policy_revision") == 1.0
    assert value(text, "kernelpolicy_policy_files") == float(len(resolution.policies.files))
    assert value(text, "kernelpolicy_decision_errors") == float(len(resolution.errors))
    assert value(text, "kernelpolicy_resolution_info", fingerprint=resolution.fingerprint) == 1.0


def test_reloads_by_outcome(daemon: Any, running: RunningDaemon, policies: Path) -> None:
    """changed, unchanged and failed reloads are counted; a failing reload shows as 1."""
    running.call(daemon.reload("test"))  # nothing changed
    (policies / "90-ops.toml").write_text(
        'schema = "kernelpolicy.policy/v1"\n[[disable]]\nfeature = "mhc"\nimpl = "aiter"\n'
        'reason = "r"\n'
    )
    running.call(daemon.reload("test"))
    (policies / "99-bad.toml").write_text("[[[")
    running.call(daemon.reload("test"))
    text = scrape(daemon)
    assert value(text, "kernelpolicy_reloads_total", outcome="unchanged") == 1.0
    assert value(text, "kernelpolicy_reloads_total", outcome="changed") == 1.0
    assert value(text, "kernelpolicy_reloads_total", outcome="failed") == 1.0
    assert value(text, "kernelpolicy_policy_reload_failing") == 1.0
    assert value(text, "kernelpolicy_policy_revision") == 2.0


def test_grpc_requests_counted_and_timed(daemon: Any) -> None:
    """The interceptor counts each RPC by method and status code, and times unary ones."""
    with grpc.insecure_channel(daemon.bound[0]) as channel:
        stub = pb_grpc.KernelPolicyStub(channel)
        for _ in range(3):
            stub.Resolve(pb.ResolveRequest(), timeout=10)
        with pytest.raises(grpc.RpcError) as missing:
            stub.Resolve(pb.ResolveRequest(features=["nope"]), timeout=10)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        stream = stub.Watch(pb.WatchRequest(), timeout=10)
        next(stream)
        stream.cancel()
    text = scrape(daemon)
    assert value(text, "kernelpolicy_grpc_requests_total", method=RESOLVE, code="OK") == 3.0
    assert value(text, "kernelpolicy_grpc_requests_total", method=RESOLVE, code="NOT_FOUND") == 1.0
    count = value(text, "kernelpolicy_grpc_request_duration_seconds_count", method=RESOLVE)
    assert count == 4.0


def test_http_requests_counted_by_route(daemon: Any) -> None:
    """Routes are the registered patterns (a key does not make a new series); others 'other'."""
    url = daemon.fleet.url
    post(url, "/ofrep/v1/evaluate/flags/mhc", {})
    post(url, "/ofrep/v1/evaluate/flags/unknown-one", {})
    call(url, "GET", "/random/path")
    call(url, "PATCH", "/healthz")
    text = scrape(daemon)
    one = "/ofrep/v1/evaluate/flags/{key}"
    total = "kernelpolicy_http_requests_total"
    assert value(text, total, route=one, method="POST", status="200") == 1.0
    assert value(text, total, route=one, method="POST", status="404") == 1.0
    assert value(text, total, route="other", method="GET", status="404") == 1.0
    assert value(text, total, route="other", method="other", status="405") == 1.0
    assert value(text, "kernelpolicy_http_request_duration_seconds_count", route=one) == 2.0


def test_openmetrics_when_asked(daemon: Any) -> None:
    reply = call(
        daemon.fleet.url, "GET", "/metrics",
        headers={"Accept": "application/openmetrics-text; version=1.0.0"},
    )  # fmt: skip
    assert reply.headers["content-type"].startswith("application/openmetrics-text")
    assert reply.body.rstrip().endswith(b"# EOF")


def test_resolution_collector_in_a_host_registry() -> None:
    """A worker exposes its own decisions and runtime fallbacks in its own registry."""
    resolution = resolve(fixture("h100-sxm"), {"KERNELPOLICY_LOG_FORMAT": "off"})
    registry = CollectorRegistry()
    registry.register(ResolutionCollector(lambda: resolution))
    before = generate_latest(registry).decode()
    labels = {"feature": "sampler.top_k_top_p", "impl": "flashinfer", "reason": "preferred",
              "error_code": ""}  # fmt: skip
    assert value(before, "kernelpolicy_decision_info", **labels) == 1.0
    resolution.impl("sampler.top_k_top_p")  # flashinfer is not installed: triton, the next
    after = generate_latest(registry).decode()
    fallback = [k for k in samples(after) if k[0] == "kernelpolicy_runtime_fallback_info"]
    assert len(fallback) == 1
    assert ("impl", "triton") in fallback[0][1]


def test_promtool_check_metrics(daemon: Any) -> None:
    """The exposition passes promtool's checks (format and naming lint)."""
    post(daemon.fleet.url, "/ofrep/v1/evaluate/flags/mhc", {})
    with grpc.insecure_channel(daemon.bound[0]) as channel:
        pb_grpc.KernelPolicyStub(channel).Resolve(pb.ResolveRequest(), timeout=10)
    promtool_check_metrics(scrape(daemon))
