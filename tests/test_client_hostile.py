"""A hostile daemon (anyone who bound the TCP port first) against the real client and CLI: a
small gRPC server on loopback answers what a malicious or broken daemon could, and
``connect().resolve()`` and ``kernelpolicy status`` must answer with one clear DaemonError (exit
2), never a crash, and never write a control character it sent to the user's terminal."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2_grpc

from kernelpolicy import connect
from kernelpolicy.cli import main
from kernelpolicy.engine import Resolution, resolve_policies
from kernelpolicy.errors import DaemonError
from kernelpolicy.limits import MAX_PLATFORM_FILE_BYTES
from kernelpolicy.policy.loader import load_policy_sources
from kernelpolicy.render import explain_table
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc
from kernelpolicy.server.convert import inputs_message, rebuild, resolve_response
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


def _set(name: str, value: str) -> Callable[[pb.Inputs], None]:
    return lambda inputs: setattr(inputs, name, value)


def _snapshot_with(**extra: Any) -> Callable[[pb.Inputs], None]:
    def change(inputs: pb.Inputs) -> None:
        inputs.platform_json = json.dumps({**json.loads(inputs.platform_json), **extra})

    return change


def _policy(text: str, name: str = "99-hostile.toml") -> Callable[[pb.Inputs], None]:
    return lambda inputs: inputs.policies.add(name=name, text=text)


def _many_bad_policies(inputs: pb.Inputs) -> None:
    for index in range(100):
        inputs.policies.add(name=f"{index}{CLEAR}.toml", text=f"{CLEAR} = {index}\n")


HOSTILE_INPUTS = [
    pytest.param(_set("platform_json", "[" * 100_000),
                 "inputs.platform_json: nested", id="snapshot-100000-brackets"),
    pytest.param(_snapshot_with(x_note=float("nan")), "NaN is not a JSON number",
                 id="snapshot-nan"),
    pytest.param(_set("platform_json", '{"schema": '), "inputs.platform_json:1:12: not JSON",
                 id="snapshot-not-json"),
    pytest.param(_set("platform_json", "1" * 5000), "not acceptable JSON (Exceeds the limit",
                 id="snapshot-5000-digit-number"),
    pytest.param(_set("platform_json", "[]"), "expected a JSON object, got []",
                 id="snapshot-not-an-object"),
    pytest.param(_snapshot_with(vendor=CLEAR), "vendor: expected one of", id="snapshot-escapes"),
    pytest.param(_set("evidence_json", "[" * 100_000),
                 "evidence from the daemon: nested", id="evidence-100000-brackets"),
    pytest.param(_set("evidence_json", '{"key": NaN}'), "NaN is not a JSON number",
                 id="evidence-nan"),
    pytest.param(_set("evidence_json", json.dumps({"key": CLEAR})), "evidence from the daemon",
                 id="evidence-not-evidence"),
    pytest.param(_policy("a = " + "[" * 100_000), "inputs.policies: 99-hostile.toml: nested",
                 id="policy-100000-brackets"),
    pytest.param(_policy(f"{UP_ERASE} = 1\n", name=f"{CLEAR}.toml"),
                 "inputs.policies: \\x1b[2J.toml", id="policy-escapes"),
    pytest.param(_many_bad_policies, "...(and ", id="policy-100-bad-documents"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "said"), HOSTILE_INPUTS)
def test_resolve_refuses_hostile_inputs(
    honest: Honest, change: Callable[[pb.Inputs], None], said: str
) -> None:
    """Inputs no daemon sends: one DaemonError naming the daemon and what was wrong, cut and
    escaped (never a RecursionError, a ValueError or a loader's error without the address)."""
    daemon = FakeDaemon(resolve=honest.resolve_response(change))
    with (
        serving(daemon) as address,
        connect(address) as client,
        pytest.raises(DaemonError) as raised,
    ):
        client.resolve()
    message = str(raised.value)
    assert message.startswith(f"the daemon at {address} answered inputs this client cannot use")
    assert said in message
    assert shown_safely(message)
    assert message.count("\n") <= 21
    assert len(message) < 30_000


def _lying_fingerprint(response: pb.ResolveResponse) -> None:
    response.fingerprint = (CLEAR + UP_ERASE) * 100_000


HOSTILE_ANSWERS = [
    pytest.param(FakeDaemon(abort=f"boom{CLEAR}" + "x" * 4_000),
                 "Resolve failed: INTERNAL: boom\\x1b[2Jxxx", id="status-details-escapes"),
    pytest.param(None, "the daemon reported '\\x1b[2J\\x1b[1A\\x1b[2K", id="fingerprint-escapes"),
]  # fmt: skip


@pytest.mark.parametrize(("daemon", "said"), HOSTILE_ANSWERS)
def test_resolve_shows_what_a_daemon_said_escaped(
    honest: Honest, daemon: FakeDaemon | None, said: str
) -> None:
    """Text of the daemon's that goes into the client's error (a failed call's details, the
    fingerprint it claims) is cut and escaped, and the error names the daemon."""
    if daemon is None:
        response = honest.resolve_response()
        _lying_fingerprint(response)
        daemon = FakeDaemon(resolve=response)
    with (
        serving(daemon) as address,
        connect(address) as client,
        pytest.raises(DaemonError) as raised,
    ):
        client.resolve()
    message = str(raised.value)
    assert message.startswith(address)
    assert said in message
    assert shown_safely(message)
    assert len(message) < 5_000


def test_rebuild_refuses_an_oversized_snapshot(honest: Honest) -> None:
    """A snapshot over MAX_PLATFORM_FILE_BYTES is refused as a file of that size would be (it
    can reach rebuild() only where a channel takes messages over gRPC's 4 MiB)."""
    inputs = inputs_message(honest.resolution, honest.sources, None)
    inputs.platform_json += " " * MAX_PLATFORM_FILE_BYTES
    with pytest.raises(DaemonError, match="over MAX_PLATFORM_FILE_BYTES"):
        rebuild(inputs, daemon="127.0.0.1:1")


def _odd_env(inputs: pb.Inputs) -> None:
    inputs.env["VLLM_USE_FLASHINFER_SAMPLER"] = CLEAR * 10_000
    inputs.env["KERNELPOLICY_FORCE_MHC"] = UP_ERASE


def _odd_overrides(inputs: pb.Inputs) -> None:
    inputs.overrides.update({"no.such.feature": CLEAR, "topk_per_row": "x" * 100_000})


def _odd_halts(inputs: pb.Inputs) -> None:
    inputs.halted.update({"no/such": CLEAR, "mhc/torch": UP_ERASE * 10_000, "": ""})


ODD_BUT_CONSISTENT = [
    pytest.param(_odd_env, id="env-escapes-and-100000-chars"),
    pytest.param(_odd_overrides, id="overrides-unknown-and-huge"),
    pytest.param(_odd_halts, id="halts-unknown-and-huge"),
]


@pytest.mark.parametrize("change", ODD_BUT_CONSISTENT)
def test_resolve_takes_odd_maps_it_can_rebuild(
    honest: Honest, change: Callable[[pb.Inputs], None]
) -> None:
    """env, overrides and halted are maps of strings the engine carries as its own: whatever
    they hold, a daemon that reports the fingerprint of what it sent gets a Resolution."""
    inputs = inputs_message(honest.resolution, honest.sources, None)
    change(inputs)
    expected = rebuild(inputs)
    response = resolve_response(expected, revision=1, inputs=inputs)
    with serving(FakeDaemon(resolve=response)) as address, connect(address) as client:
        assert client.resolve().fingerprint == expected.fingerprint


def _document(change: Callable[[dict[str, Any]], Any]) -> Callable[[Honest], str]:
    def text(honest: Honest) -> str:
        document = honest.resolution.to_dict()
        change(document)
        return json.dumps(document)

    return text


def _literal(text: str) -> Callable[[Honest], str]:
    return lambda honest: text


def _candidate(document: dict[str, Any]) -> dict[str, Any]:
    candidate: dict[str, Any] = document["decisions"]["sampler.top_k_top_p"]["candidates"][0]
    return candidate


BAD_EXPLAIN = [
    pytest.param(_literal("garbage"), "not strict JSON: ExplainResponse.json:1:1: not JSON",
                 id="not-json"),
    pytest.param(_literal("[" * 100_000), "levels deep, over MAX_NESTING_DEPTH",
                 id="100000-brackets"),
    pytest.param(_literal('{"fingerprint": NaN, "decisions": {}}'), "NaN is not a JSON number",
                 id="nan"),
    pytest.param(_literal("[]"), "(top level): expected an object, got an array", id="a-list"),
    pytest.param(_document(lambda d: d.pop("fingerprint")), "fingerprint: missing",
                 id="no-fingerprint"),
    pytest.param(_document(lambda d: d.update(fingerprint=7)),
                 "fingerprint: expected a string, got a number", id="fingerprint-a-number"),
    pytest.param(_document(lambda d: d.update(decisions=[])),
                 "decisions: expected an object, got an array", id="decisions-a-list"),
    pytest.param(_document(lambda d: d["decisions"].update(mhc=f"{CLEAR}")),
                 "decisions['mhc']: expected an object, got a string", id="decision-a-string"),
    pytest.param(_document(lambda d: d["decisions"]["mhc"].update(error=[CLEAR])),
                 "decisions['mhc'].error: expected a string, got an array", id="error-a-list"),
    pytest.param(_document(lambda d: d["decisions"]["mhc"].update(candidates=None)),
                 "decisions['mhc'].candidates: expected an array, got null",
                 id="candidates-null"),
    pytest.param(_document(lambda d: _candidate(d).update(impl=True)),
                 "decisions['sampler.top_k_top_p'].candidates[0].impl: expected a string, "
                 "got a boolean", id="impl-a-boolean"),
    pytest.param(_document(lambda d: _candidate(d)["failures"].append({"message": "m"})),
                 "candidates[0].failures[1].kind: missing", id="failure-without-kind"),
    pytest.param(_document(lambda d: _candidate(d)["failures"].append({"kind": "halted"})),
                 "candidates[0].failures[1].message: missing", id="halt-without-message"),
]  # fmt: skip


@pytest.mark.parametrize(("document", "said"), BAD_EXPLAIN)
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_status_refuses_a_bad_explain_document(
    capsys: pytest.CaptureFixture[str],
    honest: Honest,
    document: Callable[[Honest], str],
    said: str,
    as_json: bool,
) -> None:
    """An Explain document that is not strict JSON or not explain --json's shape: exit 2 with
    what was wrong (in --json, as the 'error' of the object on stdout), never a crash."""
    explain = honest.explain_response()
    explain.json = document(honest)
    with serving(FakeDaemon(explain=explain)) as address:
        code = main(["status", "--address", address, *(["--json"] if as_json else [])])
    captured = capsys.readouterr()
    assert code == 2
    if as_json:
        message = json.loads(captured.out)["error"]
        assert json.loads(captured.out)["serving"] is False
    else:
        assert captured.out == ""
        message = captured.err.removeprefix("kernelpolicy: error: ").removesuffix("\n")
    assert message.startswith(f"the daemon at {address} answered an Explain document that is not ")
    assert said in message
    assert "internal error" not in message
    assert shown_safely(message)


HUGE = (CLEAR + UP_ERASE) * 50_000


def _in_document(change: Callable[[dict[str, Any]], Any]) -> Callable[[Honest], Any]:
    def explain(honest: Honest) -> pb.ExplainResponse:
        response = honest.explain_response()
        document = json.loads(response.json)
        change(document)
        response.json = json.dumps(document)
        return response

    return explain


def _halt_reason(document: dict[str, Any]) -> None:
    candidate = document["decisions"]["sampler.top_k_top_p"]["candidates"][0]
    failure = next(f for f in candidate["failures"] if f["kind"] == "halted")
    failure["message"] = f"halted on this node: {HUGE}"


def _erring_feature_name(document: dict[str, Any]) -> None:
    document["decisions"][f"mhc{HUGE}"] = {**document["decisions"]["mhc"], "error": "e"}


def _halted_names(document: dict[str, Any]) -> None:
    decision = document["decisions"].pop("sampler.top_k_top_p")
    decision["candidates"][0]["impl"] = HUGE
    document["decisions"][f"sampler{CLEAR}"] = decision


HOSTILE_STRINGS = [
    pytest.param(_in_document(lambda d: d.update(fingerprint=HUGE)), "fingerprint",
                 id="fingerprint"),
    pytest.param(lambda h: h.explain_response(policy_files=[f"/p/{HUGE}.toml", UP_ERASE]),
                 "policy_files", id="policy-files"),
    pytest.param(lambda h: h.explain_response(policy_error=f"a.toml:1: bad\n{HUGE}" + "\n." * 30),
                 "policy_error", id="policy-error"),
    pytest.param(_in_document(lambda d: d["decisions"]["mhc"].update(error=HUGE)), "errors",
                 id="decision-error"),
    pytest.param(_in_document(_erring_feature_name), "errors", id="decision-feature-name"),
    pytest.param(_in_document(_halt_reason), "halted", id="halt-reason"),
    pytest.param(_in_document(_halted_names), "halted", id="halted-feature-and-impl"),
]  # fmt: skip


@pytest.mark.parametrize(("explain", "key"), HOSTILE_STRINGS)
def test_status_prints_daemon_strings_escaped_and_cut(
    capsys: pytest.CaptureFixture[str],
    honest: Honest,
    explain: Callable[[Honest], pb.ExplainResponse],
    key: str,
) -> None:
    """Every string a daemon sent is printed with its control characters made visible and cut
    to a bounded length; --json carries it whole, its control characters JSON-escaped."""
    response = explain(honest)
    with serving(FakeDaemon(explain=response)) as address:
        text_code = main(["status", "--address", address])
        text = capsys.readouterr().out
        json_code = main(["status", "--address", address, "--json"])
        out = capsys.readouterr().out
    assert text_code == json_code == (1 if response.policy_error else 0)
    assert shown_safely(text)
    assert "\\x1b[" in text  # made visible, not dropped
    assert len(text) < 60_000  # HUGE is 600,000 characters
    assert all(len(line) < 10_000 for line in text.split("\n"))
    assert out.isascii()
    assert shown_safely(out)
    carried = list(strings(json.loads(out)[key]))  # whole, for a program to read
    assert any(HUGE in s for s in carried)


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


@pytest.mark.parametrize(
    "reply",
    [pytest.param(b"[" * 100_000 + b"\n", id="deep"), pytest.param(b"NaN\n", id="nan"),
     pytest.param(b"\xff\xfe\n", id="not-utf8"), pytest.param(b"[]\n", id="not-an-object")],
)  # fmt: skip
def test_clear_halt_answer_is_read_bounded(tmp_path: Path, reply: bytes) -> None:
    """status --clear-halt's answer from the report socket is parsed with the bounded parser:
    whatever comes back is one DaemonError, never a RecursionError."""
    import socket
    import threading

    from kernelpolicy.errors import DaemonError
    from kernelpolicy.server.reporter import request_clear
    from kernelpolicy.server.sockets import report_path

    address = f"unix:{tmp_path / 'kp.sock'}"
    path = report_path(address, explicit=True)
    assert path is not None
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def answer() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.makefile("rb").readline()
            connection.sendall(reply)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        with pytest.raises(DaemonError, match="no answer to --clear-halt"):
            request_clear(address, "sampler.greedy", 10)
    finally:
        thread.join(10)
        listener.close()


ENTRY_POLICY = """schema = "kernelpolicy.policy/v1"
[features."sampler.greedy"]
description = "an implementation of the policy's own, then kernelpolicy's"
fallback = "torch"
[[features."sampler.greedy".candidates]]
impl = "mine"
entry = "json:dumps"
[[features."sampler.greedy".candidates]]
impl = "torch"
"""


@pytest.mark.parametrize(
    ("over", "loaded"),
    [pytest.param("tcp", "torch", id="plain-tcp: not imported, the fallback serves"),
     pytest.param("unix", "mine", id="unix-socket: the daemon is checked, imported")],
)  # fmt: skip
def test_entries_from_a_plain_tcp_daemon_are_not_imported(
    tmp_path: Path, over: str, loaded: str
) -> None:
    """An `entry` names code to import: from policies a daemon sent over TCP without TLS (any
    local user who binds the port first could have written them) it is not imported, and the
    decision falls back as for an implementation that cannot load, saying why."""
    from kernelpolicy.server.client import connect
    from kernelpolicy.testing.daemon import running_daemon
    from tests.helpers import fixture

    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "greedy.toml").write_text(ENTRY_POLICY)
    directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    listen = ("127.0.0.1:0", f"unix:{directory}/kp.sock")
    with running_daemon(fixture("cpu"), [tmp_path / "p"], watch=False, listen=listen) as running:
        address = running.daemon.bound[0] if over == "tcp" else running.daemon.bound[1]
        with connect(address) as client:
            resolution = client.resolve()
    assert resolution.decision("sampler.greedy").impl == "mine"
    function = resolution.impl("sampler.greedy")
    assert resolution.decision("sampler.greedy").impl == loaded
    if loaded == "mine":
        assert function("x") == '"x"'  # the policy's json.dumps, imported
    else:
        warnings = " ".join(resolution.decision("sampler.greedy").warnings)
        assert "sent over TCP without TLS" in warnings
