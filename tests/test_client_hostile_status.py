"""A hostile daemon (anyone who bound the TCP port first) against ``kernelpolicy status``: an
Explain document that is not strict JSON or not explain --json's shape is exit 2 saying what
was wrong, every string the daemon sent is printed escaped and cut (carried whole in --json),
and the answer to --clear-halt is read bounded. The daemon: tests/hostile_daemon.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from tests import hostile_daemon as shared
from tests.hostile_daemon import CLEAR, UP_ERASE, FakeDaemon, Honest, serving, shown_safely

honest = shared.honest  # the shared fixture, found here by its name


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
        text, err = capsys.readouterr()
        json_code = main(["status", "--address", address, "--json"])
        out = capsys.readouterr().out
    # A decision error is exit 1 where the daemon cannot say whom it concerns (this one does
    # not answer Resolve, whose policies tell the kind of model each feature matters to).
    erring = any(d.get("error") for d in json.loads(response.json)["decisions"].values())
    assert text_code == json_code == (1 if response.policy_error or erring else 0)
    assert shown_safely(text)
    assert shown_safely(err)
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
