"""OFREP v1, the OpenFeature Remote Evaluation Protocol, over one serving snapshot.

The protocol (github.com/open-feature/protocol, ``service/openapi.yaml``) has two calls: evaluate
one flag (``POST /ofrep/v1/evaluate/flags/{key}``) and evaluate every flag for a static context
(``POST /ofrep/v1/evaluate/flags``, with an ``ETag`` so that a client polling with
``If-None-Match`` gets ``304 Not Modified`` while nothing changed). Flags map as they do on the
flagd gRPC services: each feature is a string flag whose value is the chosen implementation, each
gate a boolean flag evaluated on the request's context. The functions here are pure (a snapshot
and a parsed body in, a status and a JSON document out); ``kernelpolicy.server.http`` does HTTP.

Error codes, as the protocol defines them: an unknown key is ``404 FLAG_NOT_FOUND``; a body
that is not a JSON object, or nests deeper than kernelpolicy parses (``MAX_NESTING_DEPTH``,
wherever the nesting is), is ``400 PARSE_ERROR``; a context that is not an object, too big or
too deep, or that lacks or mistypes a variable a gate needs is ``400 INVALID_CONTEXT``; a
decision that is an error on this node (a required kernel is unsupported) is ``400 GENERAL``
with the decision's message, as flagd answers evaluation errors. ``targetingKey`` is accepted
and ignored: the answers depend on the node, not on who asks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernelpolicy.errors import KernelPolicyError, ResolutionError
from kernelpolicy.limits import (
    MAX_CONTEXT_DEPTH,
    MAX_CONTEXT_ENTRIES,
    MAX_FLAG_KEY_CHARS,
    shown,
)

if TYPE_CHECKING:
    from kernelpolicy.server.state import Snapshot

TARGETING_MATCH = "TARGETING_MATCH"  # never STATIC: a reload can change a value
DISABLED = "DISABLED"


class OfrepError(KernelPolicyError):
    """An evaluation that fails as the protocol says: an HTTP status and an OFREP error code."""

    def __init__(self, status: int, code: str, details: str) -> None:
        super().__init__(details)
        self.status = status
        self.code = code
        self.details = details


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, JSON document (``None`` for no body) and extra headers."""

    status: int
    document: dict[str, Any] | None
    headers: tuple[tuple[str, str], ...] = ()

    def body(self) -> bytes:
        return b"" if self.document is None else _dumps(self.document)


def _dumps(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def parse_context(body: bytes) -> dict[str, Any]:
    """The evaluation context of a request body (``{}`` for an empty body or no ``context``).

    Raises:
        OfrepError: 400 PARSE_ERROR (not a JSON object, or nested deeper than
            ``MAX_NESTING_DEPTH`` anywhere) or 400 INVALID_CONTEXT (a context that is not an
            object, has more than ``MAX_CONTEXT_ENTRIES`` entries or nests deeper than
            ``MAX_CONTEXT_DEPTH``).
    """
    from kernelpolicy.safeio import parse_json, value_depth

    if not body.strip():
        return {}
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise OfrepError(400, "PARSE_ERROR", "the request body is not UTF-8") from None
    # The text's depth is checked before it is parsed, whichever key nests: a body too deep to
    # parse is the parser's refusal; only the parsed context is measured against its own limit.
    document = parse_json(
        text, "request body", lambda message: OfrepError(400, "PARSE_ERROR", message)
    )
    if not isinstance(document, dict):
        raise OfrepError(400, "PARSE_ERROR", "the request body must be a JSON object")
    context = document.get("context", {})
    if context is None:
        return {}
    if not isinstance(context, dict):
        raise OfrepError(400, "INVALID_CONTEXT", "'context' must be a JSON object")
    depth = value_depth(context)
    if depth > MAX_CONTEXT_DEPTH:
        raise OfrepError(
            400, "INVALID_CONTEXT",
            f"the context nests {depth} levels deep, over MAX_CONTEXT_DEPTH ({MAX_CONTEXT_DEPTH})",
        )  # fmt: skip
    context = {k: v for k, v in context.items() if k != "targetingKey"}
    if len(context) > MAX_CONTEXT_ENTRIES:
        raise OfrepError(
            400, "INVALID_CONTEXT",
            f"the context has {len(context)} entries, over MAX_CONTEXT_ENTRIES "
            f"({MAX_CONTEXT_ENTRIES})",
        )  # fmt: skip
    # JSON has one number type: integral numbers become ints, as on the gRPC services.
    return {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in context.items()}


def _metadata(snapshot: Snapshot, feature: str | None = None) -> dict[str, Any]:
    """The fingerprint, the policy digest and the revision; for a feature, where the node
    stands in each of its candidates' rollouts and staged disables too (``rollout.<impl>.*``,
    ``disable.<impl>.*``, as the resolution decided it)."""
    from kernelpolicy.engine.cohort import rollout_metadata

    metadata: dict[str, Any] = {
        "fingerprint": snapshot.resolution.fingerprint, "revision": snapshot.revision,
        "policy_digest": snapshot.policies.digest,
    }  # fmt: skip
    decision = snapshot.resolution.decisions.get(feature) if feature is not None else None
    if decision is not None:
        metadata.update(rollout_metadata(decision))
    return metadata


def _declared(declared: Mapping[str, str], context: dict[str, Any]) -> dict[str, Any]:
    from kernelpolicy.server.convert import context_for

    return context_for(declared, context)


def evaluate(snapshot: Snapshot, key: str, context: dict[str, Any]) -> dict[str, Any]:
    """One flag's OFREP success document.

    Raises:
        OfrepError: 404 FLAG_NOT_FOUND, 400 INVALID_CONTEXT (a gate's context), 400 GENERAL (a
            decision that is an error here).
    """
    resolution = snapshot.resolution
    if len(key) > MAX_FLAG_KEY_CHARS:
        raise OfrepError(
            404, "FLAG_NOT_FOUND",
            f"flag key of {len(key)} characters, over MAX_FLAG_KEY_CHARS ({MAX_FLAG_KEY_CHARS})",
        )  # fmt: skip
    base = {"key": key, "metadata": _metadata(snapshot, key)}
    gate = resolution.policies.gates.get(key)
    if gate is not None:
        try:
            value = resolution.gate(key, **_declared(dict(gate.spec.context), context))
        except (ResolutionError, TypeError) as exc:
            raise OfrepError(400, "INVALID_CONTEXT", str(exc)) from None
        variant = "on" if value else "off"
        return {**base, "value": value, "variant": variant, "reason": TARGETING_MATCH}
    decision = resolution.decisions.get(key)
    if decision is None:
        raise OfrepError(404, "FLAG_NOT_FOUND", f"flag {shown(key)!r} not found")
    if decision.error is not None:
        raise OfrepError(400, "GENERAL", f"{key}: {decision.error}")
    if decision.impl is None:  # not applicable here: the caller's code default applies
        return {**base, "variant": "not_applicable", "reason": DISABLED}
    from kernelpolicy.server.convert import CALL_ERRORS, flag_value

    try:  # none of the declared context: the node's decision; all of it: the per-call choice
        value_str = flag_value(resolution, key, context) or decision.impl
    except CALL_ERRORS as exc:
        raise OfrepError(400, "INVALID_CONTEXT", str(exc)) from None
    return {**base, "value": value_str, "variant": value_str, "reason": TARGETING_MATCH}


def evaluate_one(snapshot: Snapshot, key: str, body: bytes) -> Answer:
    """``POST /ofrep/v1/evaluate/flags/{key}``: 200 with the evaluation, or the failure."""
    try:
        return Answer(200, evaluate(snapshot, key, parse_context(body)))
    except OfrepError as exc:
        return Answer(
            exc.status,
            {"key": shown(key), "errorCode": exc.code, "errorDetails": exc.details},
        )


def evaluate_bulk(snapshot: Snapshot, body: bytes, if_none_match: str | None) -> Answer:
    """``POST /ofrep/v1/evaluate/flags``: every flag, failures included, with an ETag.

    The ETag hashes the answer itself, so it changes exactly when the answer for this context
    does; a matching ``If-None-Match`` gets 304 and no body.
    """
    try:
        context = parse_context(body)
    except OfrepError as exc:
        return Answer(exc.status, {"errorCode": exc.code, "errorDetails": exc.details})
    flags = []
    resolution = snapshot.resolution
    for key in [*resolution.decisions, *resolution.policies.gates]:
        try:
            flags.append(evaluate(snapshot, key, context))
        except OfrepError as exc:
            flags.append({"key": key, "errorCode": exc.code, "errorDetails": exc.details})
    document = {"flags": flags, "metadata": _metadata(snapshot)}
    etag = '"' + hashlib.sha256(_dumps(document)).hexdigest()[:32] + '"'
    headers = (("ETag", etag),)
    if if_none_match is not None and etag_matches(if_none_match, etag):
        return Answer(304, None, headers)
    return Answer(200, document, headers)


def etag_matches(if_none_match: str, etag: str) -> bool:
    """RFC 9110's weak comparison of ``If-None-Match`` (a list, ``*``, ``W/`` tags) to ``etag``.
    Unquoted tags count too, as flagd accepts them."""
    wanted = etag.strip('"')
    for item in if_none_match.split(","):
        tag = item.strip()
        if tag == "*":
            return True
        tag = tag.removeprefix("W/").strip('"')
        if tag == wanted:
            return True
    return False
