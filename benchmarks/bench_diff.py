#!/usr/bin/env python3
"""``kernelpolicy diff`` over 10,000 nodes against its budget: under 10 s as a whole process.

Generates an inventory of N node snapshots from the shipped fixtures (node i is fixture
i mod 14 with its own machine ID and GPU UUIDs), and the same nodes as ``kubectl get nodes -o
json`` (the labels ``kernelpolicy labels`` writes), then times, each as a fresh process:

* the reference: load both policy sets and resolve each class once with each (what any diff
  must do at least, whatever the node count);
* ``kernelpolicy diff`` over the snapshot directory, and over the kubectl file.

The new policy set is the bundled pack with the FlashInfer sampler rolled out to 50%, so the
cohorts of every node are computed. Prints each time, its ratio to the reference and to the
budget.

Usage: python benchmarks/bench_diff.py [--nodes N] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import clean_env, machine

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 10.0
REFERENCE = """
import sys, time
t = time.perf_counter()
from pathlib import Path
from kernelpolicy.inputs import load_policies_cached
from kernelpolicy.engine.decide import resolve_policies
from kernelpolicy.platform.model import load_platform
old = load_policies_cached([sys.argv[1]])
new = load_policies_cached([sys.argv[2]])
for path in sorted(Path(sys.argv[3]).glob("*.json")):
    platform = load_platform(path)
    resolve_policies(platform, platform.env, old)
    resolve_policies(platform, platform.env, new)
print(time.perf_counter() - t)
"""


def _node(base: dict[str, Any], i: int) -> dict[str, Any]:
    """Fixture ``base`` as node ``i``: its own machine ID and GPU UUIDs."""
    node = json.loads(json.dumps(base))
    node["machine_id"] = hashlib.sha256(f"node-{i}".encode()).hexdigest()[:32]
    for d, device in enumerate(node["devices"]):
        for key in ("uuid", "unique_id"):
            if key in device:
                device[key] = f"GPU-{hashlib.md5(f'{i}/{d}'.encode()).hexdigest()}"
    return node


def generate(directory: Path, count: int) -> tuple[Path, Path, Path]:
    """(snapshot directory, kubectl file, new policies) for ``count`` nodes."""
    from kernelpolicy.engine.decide import resolve_policies
    from kernelpolicy.inputs import load_policies_cached
    from kernelpolicy.labels import node_labels
    from kernelpolicy.platform.model import Platform
    from kernelpolicy.settings import bundled_policy_dir

    fixtures = sorted((ROOT / "kernelpolicy/fixtures/platforms").glob("*.json"))
    bases = [json.loads(p.read_text()) for p in fixtures]
    snapshots = directory / "snapshots"
    snapshots.mkdir()
    policies = load_policies_cached([bundled_policy_dir()])
    items = []
    for i in range(count):
        node = _node(bases[i % len(bases)], i)
        (snapshots / f"node-{i:05d}.json").write_text(json.dumps(node))
        platform = Platform.from_dict(node)
        labels = node_labels(resolve_policies(platform, platform.env, policies))
        items.append({"kind": "Node", "metadata": {"name": f"node-{i:05d}", "labels": labels}})
    kubectl = directory / "nodes.json"
    kubectl.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    new = directory / "new"
    new.mkdir(mode=0o755)
    for path in sorted(bundled_policy_dir().glob("*.toml")):
        text = path.read_text()
        if path.name == "10-sampler.toml":
            text = text.replace(
                'impl = "flashinfer"\n', 'impl = "flashinfer"\nrollout = { percent = 50 }\n', 1
            )
        (new / path.name).write_text(text)
        (new / path.name).chmod(0o644)
    return snapshots, kubectl, new


def timed(command: list[str], runs: int) -> float:
    """Median wall time of ``runs`` processes (one warm-up run first)."""
    env = clean_env()
    subprocess.run(command, env=env, check=False, capture_output=True)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, env=env, check=False, capture_output=True, text=True)
        samples.append(time.perf_counter() - start)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from kernelpolicy.settings import bundled_policy_dir

    with tempfile.TemporaryDirectory() as tmp:
        snapshots, kubectl, new = generate(Path(tmp), args.nodes)
        fixtures = ROOT / "kernelpolicy/fixtures/platforms"
        reference = timed(
            [sys.executable, "-c", REFERENCE, str(bundled_policy_dir()), str(new), str(fixtures)],
            args.runs,
        )
        diff = [sys.executable, "-m", "kernelpolicy", "diff", "--against", str(new), "--json"]
        results = {
            "nodes": args.nodes,
            "reference_s": reference,
            "snapshots_s": timed([*diff, "--platforms", str(snapshots)], args.runs),
            "kubectl_s": timed([*diff, "--platforms", str(kubectl)], args.runs),
            "budget_s": BUDGET_S,
            "machine": machine(),
        }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{machine()}; {args.nodes:,} nodes, median of {args.runs} processes")
    print(f"reference (load both sets, resolve each class once): {reference:.2f} s")
    for name in ("snapshots", "kubectl"):
        value = results[f"{name}_s"]
        assert isinstance(value, float)
        print(
            f"diff over {name}: {value:.2f} s = {value / reference:.1f}x the reference, "
            f"{value / BUDGET_S:.2f}x the {BUDGET_S:g} s budget"
        )


if __name__ == "__main__":
    main()
