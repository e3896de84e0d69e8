"""Prometheus metrics of the daemon (prometheus-client), and of any process holding a Resolution.

What a snapshot says (the decisions, the revision, the last reload error, the evidence) is read
when Prometheus scrapes, by collectors over the current snapshot, so a reload never leaves a
stale series behind. What happens over time (reloads, requests, their latency) is counted as it
happens. Every collector lives in the daemon's own registry, never in prometheus-client's global
one, so embedding kernelpolicy adds nothing to a host's ``/metrics`` unless it asks
(:class:`ResolutionCollector`).

Label values are bounded: RPC methods and HTTP routes are the registered ones (anything else
is ``other``), features and implementations come from the policy files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from kernelpolicy.limits import shown
from kernelpolicy.server.connections import CLOSE_REASONS
from kernelpolicy.server.grpc_metrics import grpc_interceptor

if TYPE_CHECKING:
    from kernelpolicy.engine.model import RolloutResult
    from kernelpolicy.engine.resolution import Resolution
    from kernelpolicy.server.state import ServingState

# Loopback answers take tens of microseconds; a slow reload or a stalled loop shows in seconds.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5)


class ResolutionCollector(Collector):
    """``kernelpolicy_decision_info`` and ``kernelpolicy_runtime_fallback_info`` of a Resolution,
    with its fingerprint (``kernelpolicy_resolution_info``), its policy digest
    (``kernelpolicy_policy_info``) and where the node stands in each staged rollout.

    A worker that serves its own ``/metrics`` can show which kernel it runs::

        prometheus_client.REGISTRY.register(ResolutionCollector(lambda: resolution))

    Args:
        current: Returns the Resolution to describe at scrape time.
    """

    def __init__(self, current: Callable[[], Resolution]) -> None:
        self._current = current

    def collect(self) -> Iterator[Metric]:
        resolution = self._current()
        decisions = InfoMetricFamily(
            "kernelpolicy_decision",
            "The implementation chosen per feature, and why (reason from a closed set).",
            labels=["feature"],
        )
        errors = GaugeMetricFamily(
            "kernelpolicy_decision_errors",
            "Features whose decision is an error (a required kernel unsupported here).",
        )
        for feature, decision in resolution.decisions.items():
            decisions.add_metric(
                [feature],
                {
                    "impl": decision.impl or "",
                    "reason": decision.reason.value,
                    "error_code": decision.error_code.value if decision.error_code else "",
                },
            )
        errors.add_metric([], len(resolution.errors))
        fallbacks = InfoMetricFamily(
            "kernelpolicy_runtime_fallback",
            "What happened to the kernels at run time in this process: a kernel that failed "
            "(import, build, launch) and what serves instead, or one that degraded.",
            labels=["feature"],
        )
        for feature, note in resolution.runtime_fallbacks.items():
            fallbacks.add_metric(
                [feature],
                {"impl": resolution.decisions[feature].impl or "", "note": shown(note, 200)},
            )
        info = InfoMetricFamily("kernelpolicy_resolution", "The resolution's fingerprint.")
        info.add_metric([], {"fingerprint": resolution.fingerprint})
        policy = InfoMetricFamily(
            "kernelpolicy_policy",
            "The policy digest: a hash of the policy files in use, equal on every node that "
            "serves the same files, whatever its hardware.",
        )
        policy.add_metric([], {"digest": resolution.policies.digest})
        yield from (decisions, errors, fallbacks, info, policy)
        yield from rollout_metrics(resolution)


def rollout_metrics(resolution: Resolution) -> tuple[Metric, ...]:
    """Where the node stands in each candidate's staged rollout, and why, as the resolution
    decided it: ``kernelpolicy_rollout_cohort`` (1 for the node's cohort, 0 for the rest of
    the closed set), ``kernelpolicy_rollout_percent`` and ``kernelpolicy_rollout_bucket_index``
    (absent without an identity). Labelled by feature and implementation of the policy set.
    The same three named ``kernelpolicy_disable_rollout_*`` for each candidate a staged
    ``[[disable]]`` names (cohort ``in``: the switch-off applies on this node)."""
    from kernelpolicy.engine.cohort import disable_rollouts_of, rollouts_of

    candidates = (
        "a candidate's staged rollout",
        "The share of nodes a candidate's staged rollout gives it to (the policy's percent).",
        "a candidate's rollout",
    )
    disables = (
        "a staged disable of a candidate (in: the disable applies on this node)",
        "The share of nodes a staged disable switches its candidate off on (the policy's percent).",
        "a staged disable",
    )
    return (
        *_cohort_metrics("rollout", candidates, rollouts_of(resolution.decisions)),
        *_cohort_metrics("disable_rollout", disables, disable_rollouts_of(resolution.decisions)),
    )


def _cohort_metrics(
    name: str, said: tuple[str, str, str], placed: Iterable[tuple[str, str, RolloutResult]]
) -> tuple[Metric, ...]:
    """``kernelpolicy_<name>_cohort``, ``_percent`` and ``_bucket_index`` of ``placed``;
    ``said``: what the cohort is in, the percent's help, what the bucket is in."""
    from kernelpolicy.policy.rollout import ROLLOUT_BUCKETS, Cohort

    cohort = GaugeMetricFamily(
        f"kernelpolicy_{name}_cohort",
        f"1 for this node's cohort in {said[0]} (in, out, off: percent 0, "
        "no-identity: nothing to place the node by), 0 for the others.",
        labels=["feature", "impl", "cohort"],
    )
    percent = GaugeMetricFamily(f"kernelpolicy_{name}_percent", said[1], labels=["feature", "impl"])
    bucket = GaugeMetricFamily(
        f"kernelpolicy_{name}_bucket_index",
        f"This node's bucket in {said[2]} (0-{ROLLOUT_BUCKETS - 1}); it is in below "
        f"percent * {ROLLOUT_BUCKETS // 100}.",
        labels=["feature", "impl"],
    )
    for feature, impl, result in placed:
        for value in Cohort:
            cohort.add_metric([feature, impl, value.value], 1 if value is result.cohort else 0)
        percent.add_metric([feature, impl], result.percent)
        if result.bucket is not None:
            bucket.add_metric([feature, impl], result.bucket)
    return (cohort, percent, bucket)


class SnapshotCollector(Collector):
    """The serving snapshot: its resolution, revision, last reload error and evidence."""

    def __init__(self, state: ServingState) -> None:
        self._state = state
        self._resolution = ResolutionCollector(lambda: self._state.snapshot.resolution)

    def collect(self) -> Iterator[Metric]:
        snapshot = self._state.snapshot
        yield from self._resolution.collect()
        revision = GaugeMetricFamily(
            "kernelpolicy_policy_revision", "The revision served (1 at start, +1 per change)."
        )
        revision.add_metric([], snapshot.revision)
        failing = GaugeMetricFamily(
            "kernelpolicy_policy_reload_failing",
            "1 while the last reload failed and the last good policies are served.",
        )
        failing.add_metric([], 1 if snapshot.policy_error else 0)
        files = GaugeMetricFamily("kernelpolicy_policy_files", "Policy files in the served set.")
        files.add_metric([], len(snapshot.sources))
        evidence = GaugeMetricFamily(
            "kernelpolicy_evidence_passed",
            "Stored verify results on this platform: 1 passed, 0 failed.",
            labels=["feature", "impl"],
        )
        problem = GaugeMetricFamily(
            "kernelpolicy_evidence_unreadable", "1 when the stored evidence could not be read."
        )
        if snapshot.evidence is not None:
            for (feature, impl), entry in sorted(snapshot.evidence.entries.items()):
                evidence.add_metric([feature, impl], 1 if entry.passed else 0)
        problem.add_metric([], 1 if snapshot.evidence and snapshot.evidence.problem else 0)
        yield from (revision, failing, files, evidence, problem)


class HaltCollector(Collector):
    """What the node's workers reported and what is halted (``halt_on``): labelled by feature
    and implementation of the policy set in use, never by anything a worker sent."""

    def __init__(self, state: ServingState) -> None:
        self._halts = state.halts

    def collect(self) -> Iterator[Metric]:
        from kernelpolicy.server.reports import EVENT_KINDS, EventKind

        halts = self._halts
        halted = set(halts.inputs())
        candidates = halts.halt_on_candidates()
        gauge = GaugeMetricFamily(
            "kernelpolicy_halted",
            "1 while the candidate is halted on this node (halt_on: its guard trips or run-time "
            "failures reached the threshold), until cleared or its policy changes.",
            labels=["feature", "impl"],
        )
        halts_total = CounterMetricFamily(
            "kernelpolicy_halts",
            "Times a candidate was halted on this node.",
            labels=["feature", "impl"],
        )
        for feature, impl in candidates:
            gauge.add_metric([feature, impl], 1 if f"{feature}/{impl}" in halted else 0)
            halts_total.add_metric([feature, impl], halts.halts_total.get((feature, impl), 0))
        events = CounterMetricFamily(
            "kernelpolicy_worker_events",
            "Run-time events the node's workers reported, by feature, implementation and kind "
            f"({', '.join(EVENT_KINDS)}).",
            labels=["feature", "impl", "kind"],
        )
        totals = dict(halts.totals)
        for feature, impl in candidates:  # the series alerts read exist from the start
            for counted in (EventKind.GUARD_TRIP, EventKind.RUNTIME_FAILURE):
                totals.setdefault((feature, impl, counted.value), 0)
        for (feature, impl, kind), count in sorted(totals.items()):
            events.add_metric([feature, impl, kind], count)
        rejected = CounterMetricFamily(
            "kernelpolicy_worker_reports_rejected",
            "Reports refused: peer_uid (another user), malformed, too_large, unknown (a feature "
            "or implementation the policies lack), connections (replaced past the cap).",
            labels=["reason"],
        )
        for reason, count in halts.rejected.items():
            rejected.add_metric([reason.value], count)
        yield from (gauge, halts_total, events, rejected)


class DaemonMetrics:
    """The daemon's registry: snapshot collectors, reload outcomes, request counts and latency.

    Args:
        state: The serving state whose snapshot the collectors describe.
    """

    def __init__(self, state: ServingState) -> None:
        from kernelpolicy.versions import KERNELPOLICY_VERSION as __version__

        self.registry = CollectorRegistry()
        self.registry.register(SnapshotCollector(state))
        self.registry.register(HaltCollector(state))
        build = InfoMetricFamily("kernelpolicy_build", "The kernelpolicy version serving.")
        build.add_metric([], {"version": __version__})
        self.registry.register(_Constant([build]))
        self.reloads = Counter(
            "kernelpolicy_reloads", "Policy reloads by outcome (changed, unchanged, failed).",
            ["outcome"], registry=self.registry,
        )  # fmt: skip
        for outcome in ("changed", "unchanged", "failed"):
            self.reloads.labels(outcome)  # every series exists from the start, at 0
        self.grpc_requests = Counter(
            "kernelpolicy_grpc_requests", "gRPC requests by method and status code.",
            ["method", "code"], registry=self.registry,
        )  # fmt: skip
        self.grpc_latency = Histogram(
            "kernelpolicy_grpc_request_duration_seconds",
            "Time to answer a unary gRPC request, by method.",
            ["method"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.http_requests = Counter(
            "kernelpolicy_http_requests", "HTTP requests by route, method and status.",
            ["route", "method", "status"], registry=self.registry,
        )  # fmt: skip
        self.http_latency = Histogram(
            "kernelpolicy_http_request_duration_seconds", "Time to answer HTTP requests, by route.",
            ["route"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.connections_closed = Counter(
            "kernelpolicy_http_connections_closed",
            "HTTP connections the daemon closed (caps, timeouts), or whose client hung up in the "
            "middle of a request, by reason.",
            ["reason"], registry=self.registry,
        )  # fmt: skip
        for reason in CLOSE_REASONS:
            self.connections_closed.labels(reason)
        self._open = _OpenGauges()
        self.registry.register(self._open)

    def count_open(self, name: str, help_text: str, current: Callable[[], int]) -> None:
        """Expose ``current()`` as the gauge ``name`` (open connections, open streams)."""
        self._open.gauges.append((name, help_text, current))

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The registry in the format ``accept`` asks for (OpenMetrics or the text format).

        Returns:
            The body and its content type.
        """
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def observe_http(self, route: str, method: str, status: int, seconds: float) -> None:
        self.http_requests.labels(route, method, str(status)).inc()
        self.http_latency.labels(route).observe(seconds)

    def interceptor(self) -> Any:
        """A ``grpc.aio`` server interceptor counting and timing every RPC."""
        return grpc_interceptor(self.grpc_requests, self.grpc_latency)


class _OpenGauges(Collector):
    """Gauges read at scrape time from whoever holds the count."""

    def __init__(self) -> None:
        self.gauges: list[tuple[str, str, Callable[[], int]]] = []

    def collect(self) -> Iterator[Metric]:
        for name, help_text, current in self.gauges:
            gauge = GaugeMetricFamily(name, help_text)
            gauge.add_metric([], current())
            yield gauge


class _Constant(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._metrics
