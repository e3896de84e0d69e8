"""An OpenFeature application using the stock OFREP provider against a daemon's HTTP listener.

Run by tests/test_ofrep_provider.py in its own process, as an application would be (and as
tests/openfeature_client.py runs the flagd provider). Prints one JSON line.
"""

from __future__ import annotations

import json
import sys

from openfeature import api
from openfeature.contrib.provider.ofrep import OFREPProvider
from openfeature.evaluation_context import EvaluationContext


def main() -> None:
    api.set_provider(OFREPProvider(base_url=sys.argv[1], timeout=10.0))
    client = api.get_client()
    topk = client.get_string_details("sampler.top_k_top_p", "unknown")
    per_call = client.get_string_value(
        "sampler.top_k_top_p",
        "unknown",
        EvaluationContext(
            targeting_key="worker-0",
            attributes={
                "has_generators": True, "has_top_k": True, "has_top_p": True,
                "logprobs_mode": "raw_logprobs",
            },
        ),
    )  # fmt: skip
    gate = client.get_boolean_details(
        "allreduce_rmsnorm.one_stage",
        True,
        EvaluationContext(
            attributes={
                "dtype": "bfloat16", "hidden_dim": 2880, "tokens": 8, "world_size": 8,
                "total_bytes": 46080, "fully_connected": True,
            }
        ),
    )  # fmt: skip
    missing = client.get_string_details("no.such.flag", "fallback")
    disabled = client.get_string_details("sparse_attn_indexer", "code-default")
    print(
        json.dumps(
            {
                "value": topk.value, "reason": str(topk.reason), "variant": topk.variant,
                "error": topk.error_code and str(topk.error_code),
                "metadata": dict(topk.flag_metadata), "per_call": per_call,
                "gate": gate.value, "gate_error": gate.error_code and str(gate.error_code),
                "missing": [missing.value, str(missing.error_code)],
                "disabled": [disabled.value, str(disabled.reason)],
            }
        ),
        flush=True,
    )  # fmt: skip
    api.shutdown()


if __name__ == "__main__":
    main()
