"""A worker process for the halt-loop tests: resolve through the node's daemon, run the greedy
sampler on ROWS all-NaN rows (each one trips the planted kernel's output guard), deliver the
reports, and print what happened as one JSON line.

Usage: python -m tests.halt_worker ADDRESS ROWS
"""

from __future__ import annotations

import json
import sys

import torch

from kernelpolicy import connect

FEATURE = "sampler.greedy"


def main(address: str, rows: int) -> int:
    with connect(address) as client:
        resolution = client.resolve()
    kernel = resolution.impl(FEATURE)
    ids = kernel(torch.full((rows, 8), float("nan"))) if rows else torch.zeros(0)
    reporter = resolution.reporter
    delivered = reporter.flush(30.0) if reporter is not None else None
    print(json.dumps({
        "impl": resolution.decision(FEATURE).impl,
        "revision": resolution.revision,
        "ids": [int(i) for i in ids],
        "delivered": delivered,
        "dropped": getattr(reporter, "dropped", None),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
