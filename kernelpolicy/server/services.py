"""The gRPC services: kernelpolicy.v1 and flagd.evaluation v1/v2, over one ServingState."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import grpc
from google.protobuf import struct_pb2

from kernelpolicy.engine.cohort import rollout_metadata
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.errors import DaemonError, ResolutionError
from kernelpolicy.render import explain_table
from kernelpolicy.server._generated.flagd.evaluation.v1 import evaluation_pb2 as f1
from kernelpolicy.server._generated.flagd.evaluation.v1 import evaluation_pb2_grpc as f1_grpc
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2 as f2
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2_grpc as f2_grpc
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc
from kernelpolicy.server.convert import (
    CALL_ERRORS,
    context_dict,
    context_for,
    flag_value,
    inputs_message,
    resolve_response,
    resolved_platform_json,
)
from kernelpolicy.server.hypothetical import Hypotheticals
from kernelpolicy.server.state import ServingState, Snapshot

KEEP_ALIVE_SECONDS = 20.0


async def _abort(
    context: grpc.aio.ServicerContext, code: grpc.StatusCode, details: str
) -> NoReturn:
    """End the RPC with ``code``: the boundary (kernelpolicy.server.rpc_boundary) answers it, cut
    to a safe length and logged when it is the client's mistake."""
    raise DaemonError(details, code)


class KernelPolicyService(pb_grpc.KernelPolicyServicer):  # type: ignore[misc]
    def __init__(self, state: ServingState, hypotheticals: Hypotheticals | None = None) -> None:
        self.state = state
        self.hypotheticals = hypotheticals or Hypotheticals()

    async def _resolution(self, snapshot: Snapshot, request: Any) -> Resolution:
        """The node's resolution, or a hypothetical one for the request's platform and/or
        environment."""
        if not (request.platform_json or request.env or request.hypothetical_env):
            return snapshot.resolution
        return await self.hypotheticals.resolve(self.state, snapshot, request)

    async def GetPlatform(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        snapshot = self.state.snapshot
        cached = snapshot.cache.get("platform")
        if cached is None:
            cached = pb.PlatformSnapshot(
                json=resolved_platform_json(snapshot.resolution, self.state.instance)
            ).SerializeToString()
            snapshot.cache.put("platform", cached)
        return cached

    async def Resolve(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        snapshot = self.state.snapshot
        plain = not (
            request.HasField("context") or request.gates or request.platform_json
            or request.env or request.hypothetical_env or request.include_inputs
        )  # fmt: skip
        key = ("resolve", tuple(request.features)) if plain else None
        if key is not None:
            cached = snapshot.cache.get(key)
            if cached is not None:
                return cached
        resolution = await self._resolution(snapshot, request)
        try:
            response = resolve_response(
                resolution,
                revision=snapshot.revision,
                features=request.features,
                context=context_dict(request.context) if request.HasField("context") else None,
                gates=request.gates,
                inputs=inputs_message(resolution, snapshot.sources, snapshot.evidence)
                if request.include_inputs
                else None,
                policy_error=snapshot.policy_error,
            )
        except ResolutionError as exc:
            await _abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        if key is not None:
            snapshot.cache.put(key, response.SerializeToString())  # sent as is next time
        return response

    async def Explain(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        snapshot = self.state.snapshot
        resolution = await self._resolution(snapshot, request)
        unknown = [f for f in request.features if f not in resolution.decisions]
        if unknown:
            await _abort(context, grpc.StatusCode.NOT_FOUND, f"unknown feature {unknown[0]!r}")
        names = list(request.features) or list(resolution.decisions)
        document = resolution.to_dict()
        document["decisions"] = {n: document["decisions"][n] for n in names}
        return pb.ExplainResponse(
            json=json.dumps(document),
            text=explain_table(resolution, names),
            revision=snapshot.revision,
            policy_error=snapshot.policy_error or "",
            policy_files=[name for name, _ in snapshot.sources],
        )

    async def ListFeatures(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        policies = self.state.snapshot.policies
        features = [
            pb.FeatureInfo(
                name=f.name, description=f.spec.description,
                implementations=[c.impl for c in f.candidates], context=dict(f.spec.context),
            )
            for f in policies.features.values()
        ]  # fmt: skip
        features += [
            pb.FeatureInfo(
                name=g.name, description=g.spec.description, context=dict(g.spec.context), gate=True
            )
            for g in policies.gates.values()
        ]
        return pb.ListFeaturesResponse(features=features)

    async def Watch(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        queue = self.state.subscribe()
        try:
            snapshot = self.state.snapshot
            while True:
                try:
                    yield resolve_response(
                        snapshot.resolution,
                        revision=snapshot.revision,
                        features=request.features,
                        inputs=inputs_message(
                            snapshot.resolution, snapshot.sources, snapshot.evidence
                        )
                        if request.include_inputs
                        else None,
                        policy_error=snapshot.policy_error,
                    )
                except ResolutionError as exc:
                    await _abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
                await queue.get()
                while not queue.empty():  # several reloads at once: send the newest only
                    queue.get_nowait()
                snapshot = self.state.snapshot
        finally:
            self.state.unsubscribe(queue)


# flagd: every feature is a string flag (value: the implementation), every gate a boolean flag.


def _metadata(snapshot: Snapshot, feature: str | None = None) -> struct_pb2.Struct:
    """The fingerprint, the policy digest and the revision; for a feature, its candidates'
    rollout cohorts too (``rollout.<impl>.cohort``, ``.percent``, ``.bucket``), as the
    resolution decided them."""
    metadata = struct_pb2.Struct()
    metadata.update({
        "fingerprint": snapshot.resolution.fingerprint, "revision": snapshot.revision,
        "policy_digest": snapshot.policies.digest,
    })  # fmt: skip
    decision = snapshot.resolution.decisions.get(feature) if feature is not None else None
    if decision is not None:
        metadata.update(rollout_metadata(decision))
    return metadata


class _Flagd:
    """The evaluation logic both flagd protocol versions share."""

    def __init__(self, state: ServingState, messages: Any) -> None:
        self.state = state
        self.m = messages

    async def _string(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        snapshot = self.state.snapshot
        with_context = request.HasField("context") and bool(request.context.fields)
        key = (self.m.__name__, request.flag_key)
        if not with_context:  # the common call: one dict lookup
            cached = snapshot.cache.get(key)
            if cached is not None:
                return cached
        response = await self._evaluate_string(snapshot, request, context, with_context)
        if not with_context:
            snapshot.cache.put(key, response.SerializeToString())  # sent as is next time
        return response

    async def _evaluate_string(
        self,
        snapshot: Snapshot,
        request: Any,
        context: grpc.aio.ServicerContext,
        with_context: bool,
    ) -> Any:
        resolution = snapshot.resolution
        name = request.flag_key
        if name in resolution.policies.gates:
            await _abort(
                context, grpc.StatusCode.INVALID_ARGUMENT, f"flag {name!r} is a boolean flag"
            )
        if name not in resolution.decisions:
            await _abort(context, grpc.StatusCode.NOT_FOUND, f"flag {name!r} not found")
        decision = resolution.decisions[name]
        if decision.error is not None:
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, f"{name}: {decision.error}")
        if decision.impl is None:  # not applicable here: the caller's default applies
            return self.m.ResolveStringResponse(
                value="", reason="DISABLED", metadata=_metadata(snapshot, name)
            )
        value = decision.impl
        if with_context:
            try:
                value = flag_value(resolution, name, context_dict(request.context)) or value
            except CALL_ERRORS as exc:
                await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        # Not STATIC: a reload can change the value, and STATIC values are cached by providers.
        return self.m.ResolveStringResponse(
            value=value, reason="TARGETING_MATCH", variant=value,
            metadata=_metadata(snapshot, name),
        )  # fmt: skip

    async def _boolean(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        snapshot = self.state.snapshot
        resolution = snapshot.resolution
        name = request.flag_key
        if name in resolution.decisions:
            await _abort(
                context, grpc.StatusCode.INVALID_ARGUMENT, f"flag {name!r} is a string flag"
            )
        gate = resolution.policies.gates.get(name)
        if gate is None:
            await _abort(context, grpc.StatusCode.NOT_FOUND, f"flag {name!r} not found")
        call = context_for(gate.spec.context, context_dict(request.context))
        try:
            value = resolution.gate(name, **call)
        except CALL_ERRORS as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        variant = "on" if value else "off"
        return self.m.ResolveBooleanResponse(
            value=value, reason="TARGETING_MATCH", variant=variant, metadata=_metadata(snapshot)
        )

    async def _mismatch(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        resolution = self.state.snapshot.resolution
        name = request.flag_key
        if name in resolution.decisions or name in resolution.policies.gates:
            kind = "string" if name in resolution.decisions else "boolean"
            await _abort(
                context, grpc.StatusCode.INVALID_ARGUMENT, f"flag {name!r} is a {kind} flag"
            )
        await _abort(context, grpc.StatusCode.NOT_FOUND, f"flag {name!r} not found")

    async def _events(self, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        queue = self.state.subscribe()
        try:
            yield self.m.EventStreamResponse(type="provider_ready", data=struct_pb2.Struct())
            while True:
                try:
                    change = await asyncio.wait_for(queue.get(), KEEP_ALIVE_SECONDS)
                except TimeoutError:
                    yield self.m.EventStreamResponse(type="keep_alive", data=struct_pb2.Struct())
                    continue
                data = struct_pb2.Struct()
                data.update({"flags": {flag: {"type": "update"} for flag in change.flags}})
                yield self.m.EventStreamResponse(type="configuration_change", data=data)
        finally:
            self.state.unsubscribe(queue)


class _FlagdMethods(_Flagd):
    async def ResolveString(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._string(request, context)

    async def ResolveBoolean(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._boolean(request, context)

    async def ResolveFloat(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._mismatch(request, context)

    async def ResolveInt(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._mismatch(request, context)

    async def ResolveObject(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._mismatch(request, context)

    async def EventStream(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        async for event in self._events(context):
            yield event


class FlagdV2(_FlagdMethods, f2_grpc.ServiceServicer):  # type: ignore[misc]
    def __init__(self, state: ServingState) -> None:
        _Flagd.__init__(self, state, f2)


class FlagdV1(_FlagdMethods, f1_grpc.ServiceServicer):  # type: ignore[misc]
    def __init__(self, state: ServingState) -> None:
        _Flagd.__init__(self, state, f1)

    async def ResolveAll(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        snapshot = self.state.snapshot
        resolution = snapshot.resolution
        given = context_dict(request.context)
        flags = {}
        for name, decision in resolution.decisions.items():
            if decision.impl is None:
                continue  # errors and not-applicable features have no value to give
            try:
                value = flag_value(resolution, name, given) or decision.impl
            except CALL_ERRORS:
                continue  # a context this flag cannot be answered for, as a flag in error
            flags[name] = f1.AnyFlag(
                reason="TARGETING_MATCH", variant=value, string_value=value,
                metadata=_metadata(snapshot, name),
            )  # fmt: skip
        for name, gate in resolution.policies.gates.items():
            call = context_for(gate.spec.context, given)
            if len(call) != len(gate.spec.context):
                continue  # a gate needs its whole context
            try:
                enabled = resolution.gate(name, **call)
            except CALL_ERRORS:
                continue
            flags[name] = f1.AnyFlag(
                reason="TARGETING_MATCH", variant="on" if enabled else "off", bool_value=enabled
            )
        return f1.ResolveAllResponse(flags=flags, metadata=_metadata(snapshot))
