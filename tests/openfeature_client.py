"""An OpenFeature application using the stock flagd provider (RPC resolver) against a daemon.

Run by tests/test_openfeature.py in its own process: the provider ships its own copy of the
flagd protos, which cannot share a process with the daemon's. Prints one JSON line per step.
"""

from __future__ import annotations

import json
import sys
import threading

from openfeature import api
from openfeature.contrib.provider.flagd import FlagdProvider
from openfeature.contrib.provider.flagd.config import ResolverType
from openfeature.event import ProviderEvent


def main() -> None:
    host, port = sys.argv[1].rsplit(":", 1)
    ready, changed = threading.Event(), threading.Event()
    changes: list[list[str]] = []
    api.add_handler(ProviderEvent.PROVIDER_READY, lambda details: ready.set())

    def on_change(details: object) -> None:
        changes.append(list(getattr(details, "flags_changed", None) or []))
        changed.set()

    api.add_handler(ProviderEvent.PROVIDER_CONFIGURATION_CHANGED, on_change)
    provider = FlagdProvider(
        host=host, port=int(port), resolver_type=ResolverType.RPC, deadline_ms=5000
    )
    api.set_provider_and_wait(provider)  # returns once the provider is READY (or raises)
    client = api.get_client()
    ok = ready.wait(20)
    topk = client.get_string_details("sampler.top_k_top_p", "unknown")
    gate = client.get_boolean_value(
        "allreduce_rmsnorm.one_stage",
        False,
    )
    print(
        json.dumps(
            {
                "step": "ready",
                "ready": ok,
                "value": topk.value,
                "reason": topk.reason,
                "variant": topk.variant,
                "error": f"{topk.error_code} {topk.error_message}",
                "gate_without_context": gate,
            }
        ),
        flush=True,
    )
    sys.stdin.readline()  # the test edits a policy file, then says go on
    seen = changed.wait(20)
    after = client.get_string_value("sampler.top_k_top_p", "unknown")
    print(
        json.dumps({"step": "changed", "seen": seen, "flags": changes, "value": after}), flush=True
    )
    api.shutdown()


if __name__ == "__main__":
    main()
