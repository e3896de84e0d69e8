"""Hypothetical answers (a Resolve or Explain with its own platform_json or env): worked out
in threads of their own beside the event loop, a bounded number at once and waiting, so that no
burst of them holds the loop that answers the node's workers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from kernelpolicy.engine.decide import halts_of
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.errors import DaemonError, KernelPolicyError, SettingsError
from kernelpolicy.inputs import Inputs, forces, given, platform_evidence
from kernelpolicy.limits import MAX_HYPOTHETICAL_RESOLVES, MAX_HYPOTHETICAL_WAITING
from kernelpolicy.platform.model import Platform
from kernelpolicy.safeio import parse_json
from kernelpolicy.server.state import ServingState, Snapshot


class Hypotheticals:
    """Where hypothetical answers (a request's own platform_json or env) are worked out: in
    ``MAX_HYPOTHETICAL_RESOLVES`` threads of their own beside the event loop, with at most
    ``MAX_HYPOTHETICAL_WAITING`` requests waiting for them, so that no burst of them (each up to
    a megabyte of JSON to parse, and a resolve) holds the loop that answers the workers. A
    request its client gave up on stops waiting; one already running finishes in its thread
    (its slot is freed at once, but the pool's two threads still bound the CPU they take).

    Each gRPC server (TCP, unix) has its own: its own waiting places and running slots, over
    threads it may share with the other's (``threads``), so that TCP clients that fill theirs
    never get the workers' hypothetical requests refused; those wait at most for the threads.
    """

    def __init__(
        self,
        work: Callable[[ServingState, Snapshot, Any], Resolution] | None = None,
        threads: ThreadPoolExecutor | None = None,
    ) -> None:
        self.work = work or _hypothetical  # what one answer takes (a test's stand-in)
        self.threads = threads or ThreadPoolExecutor(
            MAX_HYPOTHETICAL_RESOLVES, "kernelpolicy-hypothetical"
        )
        self._running = asyncio.Semaphore(MAX_HYPOTHETICAL_RESOLVES)
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Requests waiting for a running slot."""
        return self._waiting

    async def resolve(self, state: ServingState, snapshot: Snapshot, request: Any) -> Resolution:
        """The answer for ``request``'s platform and/or environment.

        Raises:
            DaemonError: RESOURCE_EXHAUSTED with too many waiting; INVALID_ARGUMENT for a
                platform_json that is no snapshot.
        """
        if self._waiting >= MAX_HYPOTHETICAL_WAITING:
            raise DaemonError(
                f"{MAX_HYPOTHETICAL_WAITING} requests with their own platform_json or env are "
                "waiting already (MAX_HYPOTHETICAL_WAITING); try again shortly",
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            )
        self._waiting += 1
        try:
            await self._running.acquire()
        finally:
            self._waiting -= 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.threads, self.work, state, snapshot, request)
        finally:
            self._running.release()


def _hypothetical(state: ServingState, snapshot: Snapshot, request: Any) -> Resolution:
    """What the node's policies decide for the request's platform and/or environment (in a
    thread of :class:`Hypotheticals`)."""
    platform = _platform(state, request)
    # This node's halts hold for what it would decide under another environment, not for
    # another platform.
    halts = None if request.platform_json else halts_of(snapshot.resolution.decisions)
    return _inputs(state, snapshot, request, platform).resolve(halts=halts)


def _platform(state: ServingState, request: Any) -> Platform:
    """The request's platform_json, else the node's.

    Raises:
        DaemonError: INVALID_ARGUMENT for a platform_json that is no snapshot.
    """
    if not request.platform_json:
        return state.platform
    try:
        return Platform.from_dict(
            parse_json(request.platform_json, "platform_json", KernelPolicyError),
            source="platform_json",
        )
    except KernelPolicyError as exc:
        message = str(exc)
        prefix = "" if message.startswith("platform_json") else "platform_json: "
        raise DaemonError(prefix + message, grpc.StatusCode.INVALID_ARGUMENT) from None


def _inputs(state: ServingState, snapshot: Snapshot, request: Any, platform: Platform) -> Inputs:
    """The answer's inputs.

    The overrides go with the environment: a request's own env brings its own
    ``KERNELPOLICY_OVERRIDES`` (none where it sets none), checked against the policies with its
    ``KERNELPOLICY_FORCE_*`` as ``kernelpolicy.resolve(env=...)`` checks them; without one the
    answer has the node's environment and the daemon's overrides. None of the request's other
    ``KERNELPOLICY_*`` settings counts: the policies, the evidence store and trust are the
    daemon's. This node's evidence counts only for a platform with its key
    (:func:`~kernelpolicy.evidence.store.platform_key`: the same device, driver, torch and
    kernel libraries); another platform has none, as ``verified = true`` means "passed
    ``kernelpolicy verify`` on that platform".

    Raises:
        DaemonError: INVALID_ARGUMENT for an env whose force or override names nothing the
            policies have, or whose ``KERNELPOLICY_OVERRIDES`` is no JSON object of strings.
    """
    env: Mapping[str, str] = state.env
    overrides: Mapping[str, str] = state.overrides
    if request.env or request.hypothetical_env:
        env = dict(request.env)
        try:
            overrides = forces(snapshot.policies, env)
        except SettingsError as exc:
            raise DaemonError(f"env: {exc}", grpc.StatusCode.INVALID_ARGUMENT) from None
    evidence = platform_evidence(snapshot.evidence, platform)
    return given(platform, env, snapshot.policies, overrides, evidence)
