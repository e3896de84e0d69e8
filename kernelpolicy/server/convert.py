"""Between Resolutions and messages: decisions out, call contexts in, inputs both ways."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf import json_format, struct_pb2

from kernelpolicy.encoding import some_lines
from kernelpolicy.engine.decide import halts_of
from kernelpolicy.engine.fallbacks import Host
from kernelpolicy.engine.hotpath import convert
from kernelpolicy.engine.model import Decision
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.engine.rules import call_variables
from kernelpolicy.engine.switches import force_variable, read_variables
from kernelpolicy.errors import DaemonError, KernelPolicyError, ResolutionError
from kernelpolicy.evidence.store import Evidence, evidence_from_json, evidence_to_json
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb


def context_dict(struct: struct_pb2.Struct | None) -> dict[str, Any]:
    """A call context from a Struct. JSON has one number type: integral doubles become ints."""
    if struct is None:
        return {}
    values = json_format.MessageToDict(struct)
    return {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in values.items()}


def context_for(declared: Mapping[str, str], context: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``context`` a feature or gate declares, with doubles where it says double."""
    out = {}
    for name, kind in declared.items():
        if name in context:
            value = context[name]
            out[name] = float(value) if kind == "double" and isinstance(value, int) else value
    return out


CALL_ERRORS = (ResolutionError, TypeError, ArithmeticError)
"""What evaluating a call context the client sent may raise: the client's mistake, reported."""


def flag_value(resolution: Resolution, name: str, given: Mapping[str, Any]) -> str | None:
    """What feature ``name`` answers as a flag (flagd, OFREP) for the context ``given``: the
    node's decision where ``given`` holds none of the variables the feature declares (a flag
    read with no context), the per-call choice (``select()``) where it holds all of them. A
    part of them is an error, as it is for ``select()``: answering the node's decision would
    drop what the caller did say (a seeded request's ``has_generators``).

    Raises:
        ResolutionError: A part of the declared context, or a value ``select()`` refuses.
        TypeError, ArithmeticError: From ``select()`` (see ``CALL_ERRORS``).
    """
    feature = resolution.policies.features[name]
    kinds = call_variables(feature)
    call = context_for(kinds, given)
    declared = list(feature.spec.context)
    given_names = [variable for variable in declared if variable in call]
    if not given_names:
        return resolution.decisions[name].impl
    if len(given_names) < len(declared):
        missing = [variable for variable in declared if variable not in call]
        raise ResolutionError(
            f"{name}: the context gives {', '.join(given_names)} but not {', '.join(missing)}; "
            "expected every variable the feature declares, or none for the node's decision"
        )
    # A JSON value of another type is refused here, as the CEL path would: the generated fast
    # path takes booleans by truthiness (the string "no" would be true).
    typed = {key: convert(f"flag {name}", key, kinds[key], value) for key, value in call.items()}
    return resolution.select(name, **typed)


def decision_message(decision: Decision) -> pb.Decision:
    return pb.Decision(
        feature=decision.feature,
        impl=decision.impl or "",
        error=decision.error or "",
        error_code=decision.error_code.value if decision.error_code else "",
        reason=decision.reason.value,
        reasons=list(decision.reasons),
        hints=list(decision.hints),
        warnings=list(decision.warnings),
        order=list(decision.order),
        candidates=[
            pb.Candidate(
                impl=c.impl,
                accepted=c.accepted,
                switch_state=c.switch,
                switch_source=c.switch_source or "",
                when=c.when or "",
                guards=list(c.guards),
                failures=[
                    pb.Check(
                        kind=f.kind.value,
                        message=f.message,
                        hint=f.hint or "",
                        reference=f.reference or "",
                    )
                    for f in c.failures
                ],
                notes=[n.message for n in c.notes],
            )
            for c in decision.candidates
        ],
    )


def resolve_response(
    resolution: Resolution,
    *,
    revision: int,
    features: Iterable[str] = (),
    context: Mapping[str, Any] | None = None,
    gates: Iterable[str] = (),
    inputs: pb.Inputs | None = None,
    policy_error: str | None = None,
) -> pb.ResolveResponse:
    """The Resolve/Watch answer. Raises ResolutionError for an unknown feature or gate."""
    names = list(features) or list(resolution.decisions)
    response = pb.ResolveResponse(
        fingerprint=resolution.fingerprint, revision=revision, policy_error=policy_error or ""
    )
    for name in names:
        message = decision_message(resolution.decision(name))
        if context:
            variables = call_variables(resolution.policies.features[name])
            try:
                message.selected = resolution.select(name, **context_for(variables, context))
            except CALL_ERRORS as exc:
                message.select_error = str(exc)
        response.decisions.append(message)
    for gate in gates:
        spec = resolution.policies.gates.get(gate)
        if spec is None:
            known = ", ".join(resolution.policies.gates)
            raise ResolutionError(f"unknown gate {gate!r}; the policies define: {known}")
        try:
            value = resolution.gate(gate, **context_for(spec.spec.context, context or {}))
            response.gates.append(pb.GateValue(name=gate, value=value))
        except CALL_ERRORS as exc:
            response.gates.append(pb.GateValue(name=gate, error=str(exc)))
    if inputs is not None:
        response.inputs.CopyFrom(inputs)
    return response


def resolved_platform_json(resolution: Resolution, instance: Mapping[str, str]) -> str:
    """The snapshot as the daemon resolves it (``GetPlatform``): for each variable its policies
    read, the daemon's own value (``serve --env`` included; absent where it is unset), and each
    force it applies (a settings override too) as ``KERNELPOLICY_FORCE_<FEATURE>``, so that
    ``diff --daemons``, resolving this snapshot, decides what the daemon decides; and the
    daemon's ``instance`` (``ServingState.instance``, key ``daemon``)."""
    read = read_variables(resolution.policies)
    env = {k: v for k, v in resolution.platform.env.items() if k not in read}
    env.update(resolution.env)
    env.update({force_variable(feature): impl for feature, impl in resolution.overrides.items()})
    return json.dumps({**resolution.platform.to_dict(), "env": env, "daemon": dict(instance)})


def inputs_message(
    resolution: Resolution, sources: Iterable[tuple[str, str]], evidence: Evidence | None
) -> pb.Inputs:
    """What a client needs to rebuild the same Resolution (same fingerprint) in its process.

    ``evidence`` (the node's) is sent only where it is the evidence of the answer's platform:
    an answer about a platform with another key used none (:mod:`kernelpolicy.server.hypothetical`).
    Each policy text goes with the path the daemon read it from, so that a client names a
    file as a local answer and ``status`` do (the digest takes base names: the same digest).
    """
    from kernelpolicy.inputs import platform_evidence

    evidence = platform_evidence(evidence, resolution.platform)
    return pb.Inputs(
        platform_json=resolution.platform.to_json(indent=None),
        env=dict(resolution.env),
        overrides=dict(resolution.overrides),
        policies=[pb.PolicySource(name=n, text=t) for n, t in sources],
        evidence_json=evidence_to_json(evidence) if evidence is not None else "",
        halted=halts_of(resolution.decisions),
    )


def rebuild(inputs: pb.Inputs, host: Host | None = None, *, daemon: str = "") -> Resolution:
    """A Resolution from a daemon's inputs, resolved here by the same pure engine.

    Each input is read as from an untrusted file (the daemon may be anyone who bound its TCP
    port first): the snapshot as strict JSON of at most ``MAX_PLATFORM_FILE_BYTES`` nested at
    most ``MAX_NESTING_DEPTH`` deep, the policy texts and the evidence by their own bounded
    loaders. ``env``, ``overrides`` and ``halted`` are maps of strings that the engine carries
    as it carries its own (pairs the policies do not have are ignored).

    Args:
        inputs: The ``inputs`` of a Resolve or Watch answer.
        host: What this process gives the Resolution (its log, the node's daemon).
        daemon: The daemon's address, named in the error.

    Raises:
        DaemonError: An input is not what a daemon sends (too deep or large, not JSON, NaN, not
            a snapshot, policies or evidence that do not load), naming the daemon, the input
            and what was wrong, cut and escaped.
    """
    from kernelpolicy.inputs import given
    from kernelpolicy.platform.model import load_platform_bytes
    from kernelpolicy.policy.loader import load_policy_sources

    def refused(problem: str) -> DaemonError:
        where = f"the daemon at {daemon}" if daemon else "the daemon"
        return DaemonError(f"{where} answered inputs this client cannot use: {some_lines(problem)}")

    try:
        platform = load_platform_bytes(inputs.platform_json.encode(), "inputs.platform_json")
        evidence = evidence_from_json(inputs.evidence_json) if inputs.evidence_json else None
    except KernelPolicyError as exc:  # PlatformFileError, EvidenceError
        raise refused(str(exc)) from None
    try:
        policies = load_policy_sources([(s.name, s.text) for s in inputs.policies])
    except KernelPolicyError as exc:  # PolicyError: each issue names its document
        raise refused(f"inputs.policies: {exc}") from None
    rebuilt = given(platform, dict(inputs.env), policies, dict(inputs.overrides), evidence)
    return rebuilt.resolve(host=host, halts=dict(inputs.halted))
