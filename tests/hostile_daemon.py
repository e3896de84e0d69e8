"""A hostile daemon for the client's tests (tests/test_client_hostile_*.py): a small gRPC server
on loopback that answers whatever it is given, what an honest daemon would answer (to change),
and the escape sequences it sends."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2_grpc

from kernelpolicy.engine import Resolution, resolve_policies
from kernelpolicy.policy.loader import load_policy_sources
from kernelpolicy.render import explain_table
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc
from kernelpolicy.server.convert import inputs_message, resolve_response
from tests.helpers import ROOT, fixture

CLEAR = "\x1b[2J"
"""Clears the screen where it reaches a terminal; shown escaped it is harmless."""
UP_ERASE = "\x1b[1A\x1b[2K"
"""Moves up a line and erases it: would hide the line before."""
HALTED = "sampler.top_k_top_p/flashinfer"


@dataclass
class FakeDaemon(pb_grpc.KernelPolicyServicer):  # type: ignore[misc]  # generated, untyped
    """Answers every Resolve and Explain with what it was given (or aborts with ``abort``)."""

    resolve: pb.ResolveResponse = field(default_factory=pb.ResolveResponse)
    explain: pb.ExplainResponse = field(default_factory=pb.ExplainResponse)
    abort: str | None = None

    def Resolve(self, request: Any, context: grpc.ServicerContext) -> Any:
        if self.abort is not None:
            context.abort(grpc.StatusCode.INTERNAL, self.abort)
        return self.resolve

    def Explain(self, request: Any, context: grpc.ServicerContext) -> Any:
        if self.abort is not None:
            context.abort(grpc.StatusCode.INTERNAL, self.abort)
        return self.explain


@contextmanager
def serving(daemon: FakeDaemon) -> Iterator[str]:
    """``daemon`` (with a health service that says SERVING) on a loopback port: its address."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_KernelPolicyServicer_to_server(daemon, server)
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


@dataclass(frozen=True)
class Honest:
    """What a real daemon answers for the bundled policies on an H100 node, one kernel halted."""

    resolution: Resolution
    sources: list[tuple[str, str]]

    def resolve_response(self, change: Callable[[pb.Inputs], None] | None = None) -> Any:
        """The Resolve answer with its inputs changed by ``change``; the fingerprint stays the
        honest one (what a daemon that lies about its inputs reports)."""
        inputs = inputs_message(self.resolution, self.sources, None)
        if change is not None:
            change(inputs)
        return resolve_response(self.resolution, revision=1, inputs=inputs)

    def explain_response(self, **fields: Any) -> pb.ExplainResponse:
        """The Explain answer, with ``fields`` in place of the daemon's own."""
        answer: dict[str, Any] = {
            "json": json.dumps(self.resolution.to_dict()),
            "text": explain_table(self.resolution, list(self.resolution.decisions)),
            "revision": 1,
            "policy_files": [name for name, _ in self.sources],
        }
        return pb.ExplainResponse(**{**answer, **fields})


@pytest.fixture(scope="module")
def honest() -> Honest:
    sources = [(str(p), p.read_text()) for p in sorted((ROOT / "policies").glob("*.toml"))]
    policies = load_policy_sources(sources)
    halts = {HALTED: "halt_on.guard_trips = 2 (last: bad rows)"}
    resolution = resolve_policies(fixture("h100-sxm"), {}, policies, halts=halts)
    return Honest(resolution, sources)


def shown_safely(text: str) -> bool:
    """Whether ``text`` is lines holding no control character (the line breaks aside)."""
    return all(line.isprintable() for line in text.split("\n"))
