"""Hypothetical answers (a Resolve or Explain with its own platform_json or env): worked out
in threads of their own beside the event loop, a bounded number at once and waiting, so that no
burst of them holds the loop that answers the node's workers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from kernelpolicy.engine.decide import halts_of, resolve_policies
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.errors import DaemonError, KernelPolicyError
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
    try:
        platform = (
            Platform.from_dict(
                parse_json(request.platform_json, "platform_json", KernelPolicyError),
                source="platform_json",
            )
            if request.platform_json
            else state.platform
        )
    except KernelPolicyError as exc:
        message = str(exc)
        prefix = "" if message.startswith("platform_json") else "platform_json: "
        raise DaemonError(prefix + message, grpc.StatusCode.INVALID_ARGUMENT) from None
    env: Mapping[str, str] = (
        dict(request.env) if (request.env or request.hypothetical_env) else state.env
    )
    # This node's halts hold for what it would decide under another environment, not for
    # another platform.
    halts = None if request.platform_json else halts_of(snapshot.resolution.decisions)
    return resolve_policies(
        platform, env, snapshot.policies, state.overrides, snapshot.evidence, halts=halts
    )
