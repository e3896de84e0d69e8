"""The daemon's HTTP listener: OFREP v1 on a real daemon, health, limits, errors, TLS."""

from __future__ import annotations

import json
import shutil
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.errors import DaemonError
from kernelpolicy.limits import (
    MAX_CONTEXT_DEPTH,
    MAX_CONTEXT_ENTRIES,
    MAX_FLAG_KEY_CHARS,
    MAX_HTTP_BODY_BYTES,
    MAX_HTTP_HEADER_BYTES,
    MAX_HTTP_HEADERS,
)
from kernelpolicy.server import ofrep
from kernelpolicy.server.fleet import Fleet
from kernelpolicy.server.http import parse_http_address
from kernelpolicy.server.state import ServingState
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture
from tests.http_helpers import call, post, raw, status_of

ONE = "/ofrep/v1/evaluate/flags/"
BULK = "/ofrep/v1/evaluate/flags"
SAMPLER_CONTEXT = {
    "has_generators": True, "has_top_k": True, "has_top_p": True, "logprobs_mode": "raw_logprobs",
}  # fmt: skip
DEEP_OUTSIDE_CONTEXT = '{"other":' + "[" * 5000 + "]" * 5000 + ',"context":{}}'
NESTED_20: Any = 1
for _ in range(20):
    NESTED_20 = [NESTED_20]
GATE_CONTEXT = {
    "dtype": "bfloat16", "hidden_dim": 2880, "tokens": 8, "world_size": 8,
    "total_bytes": 46080, "fully_connected": True,
}  # fmt: skip


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """One daemon for the read-only tests: the H100 fixture, the bundled pack, HTTP on."""
    with running_daemon(
        fixture("h100-sxm"), [ROOT / "policies"], watch=False, http="127.0.0.1:0"
    ) as running:
        yield running.daemon.fleet.url


@pytest.mark.parametrize(
    ("key", "body", "status", "expected"),
    [
        pytest.param("sampler.top_k_top_p", {}, 200,
                     {"value": "flashinfer", "variant": "flashinfer", "reason": "TARGETING_MATCH"},
                     id="feature"),
        pytest.param("sampler.top_k_top_p", None, 200, {"value": "flashinfer"}, id="empty-body"),
        pytest.param("sampler.top_k_top_p", {"context": {"targetingKey": "node-7"}}, 200,
                     {"value": "flashinfer"}, id="targeting-key-ignored"),
        pytest.param("sampler.top_k_top_p", {"context": SAMPLER_CONTEXT}, 200,
                     {"value": "triton"}, id="per-call-choice"),
        pytest.param("sampler.top_k_top_p",
                     {"context": {**SAMPLER_CONTEXT, "has_generators": False}}, 200,
                     {"value": "flashinfer"}, id="per-call-no-batch"),
        pytest.param("sampler.top_k_top_p",
                     {"context": {**SAMPLER_CONTEXT, "has_generators": False, "batch": 8,
                                  "dtype": "bfloat16"}}, 200,
                     {"value": "triton"}, id="per-call-small-batch"),
        pytest.param("sampler.top_k_top_p",
                     {"context": {**SAMPLER_CONTEXT, "has_generators": False, "batch": 1024,
                                  "dtype": "bfloat16"}}, 200,
                     {"value": "triton"}, id="per-call-large-batch"),
        pytest.param("sampler.top_k_top_p",
                     {"context": {**SAMPLER_CONTEXT, "batch": "many"}}, 400,
                     {"errorCode": "INVALID_CONTEXT"}, id="per-call-batch-mistyped"),
        pytest.param("sampler.top_k_top_p", {"context": {"has_generators": True}}, 400,
                     {"errorCode": "INVALID_CONTEXT"}, id="per-call-part-of-the-context"),
        pytest.param("sampler.top_k_top_p",
                     {"context": {**SAMPLER_CONTEXT, "has_generators": "no"}}, 400,
                     {"errorCode": "INVALID_CONTEXT"}, id="per-call-bool-as-string"),
        pytest.param("allreduce_rmsnorm.one_stage", {"context": GATE_CONTEXT}, 200,
                     {"value": False, "variant": "off"}, id="gate"),
        pytest.param("sparse_attn_indexer", {}, 200, {"reason": "DISABLED"}, id="not-applicable"),
        pytest.param("allreduce_rmsnorm.one_stage", {}, 400,
                     {"errorCode": "INVALID_CONTEXT"}, id="gate-without-context"),
        pytest.param("allreduce_rmsnorm.one_stage",
                     {"context": {**GATE_CONTEXT, "tokens": "many"}}, 400,
                     {"errorCode": "INVALID_CONTEXT"}, id="gate-mistyped"),
        pytest.param("no.such.flag", {}, 404, {"errorCode": "FLAG_NOT_FOUND"}, id="unknown"),
        pytest.param("sampler.greedy", "not json", 400, {"errorCode": "PARSE_ERROR"},
                     id="not-json"),
        pytest.param("sampler.greedy", [1, 2], 400, {"errorCode": "PARSE_ERROR"}, id="array"),
        pytest.param("sampler.greedy", {"context": [1]}, 400, {"errorCode": "INVALID_CONTEXT"},
                     id="context-array"),
        pytest.param("sampler.greedy", DEEP_OUTSIDE_CONTEXT, 400, {"errorCode": "PARSE_ERROR"},
                     id="too-deep-outside-context"),
        pytest.param("sampler.greedy", {"other": NESTED_20, "context": {}}, 200,
                     {"value": "torch"}, id="nested-outside-context-within-parse-limit"),
        pytest.param("sampler.greedy", {"context": {"deep": NESTED_20}}, 400,
                     {"errorCode": "INVALID_CONTEXT"}, id="context-too-deep"),
    ],
)  # fmt: skip
def test_single_evaluation_table(
    url: str, key: str, body: Any, status: int, expected: dict[str, Any]
) -> None:
    """Status, error codes and values as the OFREP spec says; the key is always echoed."""
    if isinstance(body, str):
        reply = call(url, "POST", ONE + key, body)
    else:
        reply = post(url, ONE + key, body)
    assert reply.status == status, reply.body
    assert reply.headers["content-type"].startswith("application/json")
    document = reply.json()
    assert document["key"] == key
    assert {k: document.get(k) for k in expected} == expected
    if status == 200:
        assert set(document["metadata"]) == {"fingerprint", "policy_digest", "revision"}
    if expected.get("reason") == "DISABLED":
        assert "value" not in document  # the caller's code default applies


def test_decision_error_is_general() -> None:
    """A decision that is an error here (required on AMD, switched off): 400 GENERAL + why."""
    state = ServingState(fixture("mi250x"), {}, [ROOT / "policies"], {})
    answer = ofrep.evaluate_one(state.snapshot, "sparse_attn_indexer", b"{}")
    assert answer.status == 400
    assert answer.document is not None
    assert answer.document["errorCode"] == "GENERAL"
    assert "VLLM_ROCM_USE_AITER" in answer.document["errorDetails"]


def test_bulk_etag_and_304(url: str) -> None:
    """Every flag in one answer with an ETag; If-None-Match with it gives 304 and no body."""
    first = post(url, BULK, {"context": {}})
    assert first.status == 200
    etag = first.headers["etag"]
    flags = {f["key"]: f for f in first.json()["flags"]}
    assert flags["sampler.top_k_top_p"]["value"] == "flashinfer"
    assert flags["allreduce_rmsnorm.one_stage"]["errorCode"] == "INVALID_CONTEXT"
    for header in (etag, f"W/{etag}", f'"other", {etag}', etag.strip('"'), "*"):
        again = post(url, BULK, {"context": {}}, **{"If-None-Match": header})
        assert (again.status, again.body, again.headers["etag"]) == (304, b"", etag), header
    assert post(url, BULK, {"context": {}}, **{"If-None-Match": '"stale"'}).status == 200
    with_context = post(url, BULK, {"context": GATE_CONTEXT})
    assert with_context.headers["etag"] != etag
    gate = {f["key"]: f for f in with_context.json()["flags"]}["allreduce_rmsnorm.one_stage"]
    assert gate["value"] is False
    assert post(url, BULK + "/", {}).status == 200  # flagd's trailing-slash form
    assert post(url, BULK, {"context": 3}).json()["errorCode"] == "INVALID_CONTEXT"


def test_bulk_etag_changes_after_a_reload(tmp_path: Path) -> None:
    """A policy edit that changes a decision changes the ETag: pollers see it."""
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    with running_daemon(fixture("h100-sxm"), [policies], watch=False, http="127.0.0.1:0") as d:
        before = post(d.daemon.fleet.url, BULK, {})
        (policies / "90-ops.toml").write_text(
            'schema = "kernelpolicy.policy/v1"\n[[disable]]\nfeature = "sampler.top_k_top_p"\n'
            'impl = "flashinfer"\nreason = "incident 4711"\n'
        )
        d.call(d.daemon.reload("test"))
        after = post(d.daemon.fleet.url, BULK, {}, **{"If-None-Match": before.headers["etag"]})
        assert after.status == 200
        flags = {f["key"]: f for f in after.json()["flags"]}
        assert flags["sampler.top_k_top_p"]["value"] == "triton"
        assert flags["sampler.top_k_top_p"]["metadata"]["revision"] == 2


def test_health_and_readiness(url: str) -> None:
    assert call(url, "GET", "/healthz").json() == {"status": "ok"}
    ready = call(url, "GET", "/readyz")
    assert ready.status == 200
    assert ready.json()["status"] == "ready"
    assert ready.json()["revision"] == 1


def test_not_ready_until_started() -> None:
    """Before the listener starts (and after it stops) /readyz has a reason to say no."""
    fleet = Fleet(ServingState(fixture("cpu"), {}, [ROOT / "policies"], {}))
    assert fleet.not_ready() is not None
    fleet.ready = True
    assert fleet.not_ready() is None


def test_failed_reload_stays_ready(tmp_path: Path) -> None:
    """A bad policy file keeps the last good set served: ready, with the error shown."""
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    with running_daemon(fixture("cpu"), [policies], watch=False, http="127.0.0.1:0") as d:
        (policies / "99-bad.toml").write_text("this is not toml [")
        d.call(d.daemon.reload("test"))
        ready = call(d.daemon.fleet.url, "GET", "/readyz")
        assert ready.status == 200
        assert "99-bad.toml" in ready.json()["policy_error"]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/nope", 404, id="unknown-route"),
        pytest.param("GET", ONE + "sampler.greedy", 405, id="get-on-ofrep"),
        pytest.param("DELETE", "/metrics", 405, id="delete-metrics"),
    ],
)
def test_router_errors_are_json(url: str, method: str, path: str, status: int) -> None:
    reply = call(url, method, path)
    assert reply.status == status
    assert "errorDetails" in reply.json()


def _context_body(total: int) -> bytes:
    """A valid OFREP body of exactly ``total`` bytes."""
    head = b'{"context":{"pad":"'
    tail = b'"}}'
    return head + b"a" * (total - len(head) - len(tail)) + tail


@pytest.mark.parametrize(("extra", "status"), [pytest.param(0, 200, id="at-limit"),
                                               pytest.param(1, 413, id="limit+1")])  # fmt: skip
def test_body_limit(url: str, extra: int, status: int) -> None:
    """MAX_HTTP_BODY_BYTES: 413 with a JSON error past it."""
    body = _context_body(MAX_HTTP_BODY_BYTES + extra)
    reply = call(url, "POST", ONE + "sampler.greedy", body)
    assert reply.status == status
    if status == 413:
        assert "MAX_HTTP_BODY_BYTES" in reply.json()["errorDetails"]


@pytest.mark.parametrize(("extra", "status"), [pytest.param(0, 200, id="at-limit"),
                                               pytest.param(1, 400, id="limit+1")])  # fmt: skip
def test_header_value_and_target_limits(url: str, extra: int, status: int) -> None:
    """MAX_HTTP_HEADER_BYTES bounds each header value and the request target."""
    value = b"a" * (MAX_HTTP_HEADER_BYTES + extra)
    reply = raw(url, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + value
                + b"\r\nConnection: close\r\n\r\n")  # fmt: skip
    assert status_of(reply) == status
    target = b"/healthz?" + b"a" * (MAX_HTTP_HEADER_BYTES + extra - len(b"/healthz?"))
    reply = raw(url, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status_of(reply) == status


@pytest.mark.parametrize(("extra", "status"), [pytest.param(0, 200, id="at-limit"),
                                               pytest.param(1, 400, id="limit+1")])  # fmt: skip
def test_header_count_limit(url: str, extra: int, status: int) -> None:
    """MAX_HTTP_HEADERS header lines, Host and Connection included."""
    others = b"".join(b"X-%d: 1\r\n" % i for i in range(MAX_HTTP_HEADERS + extra - 2))
    reply = raw(url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + others
                + b"Connection: close\r\n\r\n")  # fmt: skip
    assert status_of(reply) == status


@pytest.mark.parametrize(("extra", "found"), [pytest.param(0, "not found", id="at-limit"),
                                              pytest.param(1, "MAX_FLAG_KEY_CHARS",
                                                           id="limit+1")])  # fmt: skip
def test_flag_key_limit(url: str, extra: int, found: str) -> None:
    """MAX_FLAG_KEY_CHARS: a longer key cannot name a flag, and is not echoed whole."""
    key = "k" * (MAX_FLAG_KEY_CHARS + extra)
    reply = post(url, ONE + key, {})
    assert reply.status == 404
    assert found in reply.json()["errorDetails"]
    assert len(json.dumps(reply.json())) < MAX_FLAG_KEY_CHARS + 400


@pytest.mark.parametrize(("extra", "status"), [pytest.param(0, 200, id="at-limit"),
                                               pytest.param(1, 400, id="limit+1")])  # fmt: skip
def test_context_entries_limit(url: str, extra: int, status: int) -> None:
    context = {f"v{i}": i for i in range(MAX_CONTEXT_ENTRIES + extra)}
    reply = post(url, ONE + "sampler.greedy", {"context": context})
    assert reply.status == status
    if status == 400:
        assert "MAX_CONTEXT_ENTRIES" in reply.json()["errorDetails"]


@pytest.mark.parametrize(("extra", "status"), [pytest.param(0, 200, id="at-limit"),
                                               pytest.param(1, 400, id="limit+1")])  # fmt: skip
def test_context_depth_limit(url: str, extra: int, status: int) -> None:
    nested: Any = 1
    for _ in range(MAX_CONTEXT_DEPTH + extra - 1):
        nested = {"n": nested}
    reply = post(url, ONE + "sampler.greedy", {"context": {"deep": nested}})
    assert reply.status == status
    if status == 400:
        assert "MAX_CONTEXT_DEPTH" in reply.json()["errorDetails"]


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        pytest.param("9464", ("127.0.0.1", 9464), id="bare-port-is-loopback"),
        pytest.param("0.0.0.0:9464", ("0.0.0.0", 9464), id="all"),
        pytest.param("[::1]:0", ("::1", 0), id="v6"),
        pytest.param(":9464", ("127.0.0.1", 9464), id="empty-host"),
        pytest.param("host:http", None, id="named-port"),
        pytest.param("70000", None, id="port-too-big"),
    ],
)
def test_http_address_forms(address: str, expected: tuple[str, int] | None) -> None:
    if expected is None:
        with pytest.raises(DaemonError, match="expected PORT"):
            parse_http_address(address)
    else:
        assert parse_http_address(address) == expected


def test_address_in_use_is_a_clear_error(url: str) -> None:
    port = url.rsplit(":", 1)[1]
    with (
        pytest.raises(DaemonError, match=r"cannot listen on .* for HTTP"),
        running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False, http=f"127.0.0.1:{port}"),
    ):
        pass


def test_tls_with_the_grpc_files(tmp_path: Path) -> None:
    """KERNELPOLICY_TLS_* apply to HTTP too: https, and the certificate verifies."""
    from kernelpolicy.server.daemon import TlsFiles
    from tests.helpers import make_certificate

    cert, key = make_certificate(tmp_path)
    with running_daemon(
        fixture("cpu"), [ROOT / "policies"], watch=False, http="127.0.0.1:0",
        tls=TlsFiles.load(cert, key),
    ) as running:  # fmt: skip
        assert running.daemon.fleet.url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=str(cert))
        reply = call(running.daemon.fleet.url, "GET", "/healthz", context=context)
        assert reply.json() == {"status": "ok"}
        with pytest.raises(ssl.SSLError):  # an unknown CA: refused
            call(running.daemon.fleet.url, "GET", "/healthz", context=ssl.create_default_context())


def test_tls_client_certificates_required_with_a_ca(tmp_path: Path) -> None:
    """KERNELPOLICY_TLS_CLIENT_CA_FILE applies to HTTP too: no client certificate, no answer."""
    from kernelpolicy.server.daemon import TlsFiles
    from tests.helpers import make_certificate

    server_dir, client_dir = tmp_path / "server", tmp_path / "client"
    server_dir.mkdir()
    client_dir.mkdir()
    cert, key = make_certificate(server_dir)
    client_cert, client_key = make_certificate(client_dir)  # self-signed: it is its own CA
    tls = TlsFiles.load(cert, key, client_cert)
    with running_daemon(
        fixture("cpu"), [ROOT / "policies"], watch=False, http="127.0.0.1:0", tls=tls
    ) as running:
        trusted = ssl.create_default_context(cafile=str(cert))
        with pytest.raises((ssl.SSLError, ConnectionError)):
            call(running.daemon.fleet.url, "GET", "/healthz", context=trusted)
        trusted.load_cert_chain(client_cert, client_key)
        assert call(running.daemon.fleet.url, "GET", "/healthz", context=trusted).status == 200


def test_fleet_doc_states_each_limit() -> None:
    """docs/fleet.md names every HTTP and label limit with its current value."""
    from kernelpolicy.limits import (
        MAX_FEATURE_FILE_BYTES,
        MAX_HTTP_BODY_SECONDS,
        MAX_HTTP_CONNECTIONS,
        MAX_HTTP_CONNECTIONS_PER_PEER,
        MAX_HTTP_HEADER_SECONDS,
        MAX_HTTP_IDLE_SECONDS,
    )

    page = (ROOT / "docs/fleet.md").read_text()
    shown = {
        "MAX_HTTP_BODY_BYTES": f"{MAX_HTTP_BODY_BYTES // 1024} KiB",
        "MAX_HTTP_HEADER_BYTES": f"{MAX_HTTP_HEADER_BYTES // 1024} KiB",
        "MAX_HTTP_HEADERS": f"{MAX_HTTP_HEADERS} header lines",
        "MAX_FLAG_KEY_CHARS": f"{MAX_FLAG_KEY_CHARS} characters",
        "MAX_CONTEXT_ENTRIES": f"{MAX_CONTEXT_ENTRIES} entries",
        "MAX_CONTEXT_DEPTH": f"{MAX_CONTEXT_DEPTH} levels",
        "MAX_FEATURE_FILE_BYTES": f"{MAX_FEATURE_FILE_BYTES // 1024} KiB",
        "MAX_HTTP_CONNECTIONS": f"{MAX_HTTP_CONNECTIONS} connections",
        "MAX_HTTP_CONNECTIONS_PER_PEER": f"{MAX_HTTP_CONNECTIONS_PER_PEER} connections",
        "MAX_HTTP_HEADER_SECONDS": f"{MAX_HTTP_HEADER_SECONDS:g} s",
        "MAX_HTTP_BODY_SECONDS": f"{MAX_HTTP_BODY_SECONDS:g} s",
        "MAX_HTTP_IDLE_SECONDS": f"{MAX_HTTP_IDLE_SECONDS:g} s",
    }
    for name, value in shown.items():
        assert f"| `{name}` | {value}" in page, name


def test_a_part_of_a_features_context_is_named(url: str) -> None:
    """A feature flag asked with some of its declared variables answers what is missing, as
    select() does, instead of the node's decision (which would drop a seeded request's
    has_generators); in the bulk answer, that flag alone is in error."""
    reply = post(url, ONE + "sampler.top_k_top_p", {"context": {"has_generators": True}})
    details = reply.json()["errorDetails"]
    assert "gives has_generators but not has_top_k, has_top_p, logprobs_mode" in details
    flags = {
        f["key"]: f for f in post(url, BULK, {"context": {"has_generators": True}}).json()["flags"]
    }
    assert flags["sampler.top_k_top_p"]["errorCode"] == "INVALID_CONTEXT"
    assert flags["sampler.greedy"]["value"] == "torch"
