"""Policy loading is linear: N-feature files loaded beside ``tomllib.loads`` of the same text.

``load_policies`` reads, parses, validates (pydantic), compiles every CEL condition and locates
every element in the text; ``tomllib.loads`` only parses. The ratio should stay flat as N grows
(linear); before the text was indexed once per file it grew with N (quadratic). A last row times
a 10,000-feature file whose last feature has a mistake: the path that locates an issue.

    python benchmarks/bench_load.py            # 1k, 2k, 5k, 10k features
    python benchmarks/bench_load.py --json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine

from kernelpolicy.errors import PolicyError
from kernelpolicy.policy import load_policies

SIZES = (1_000, 2_000, 5_000, 10_000)


def feature(index: int) -> str:
    """One feature shaped like the bundled pack's: a conditional kernel and a fallback
    (about 260 bytes, so 10,000 features are about 2.5 MiB)."""
    name = f"bench.f{index:05d}"
    return f"""
[features."{name}"]
description = "generated {index}"
fallback = "torch"
context = {{ tokens = "int" }}

[[features."{name}".candidates]]
impl = "fast"
vendor = "nvidia"
when = "tokens <= {64 + index % 64}"
entry = "bench:fast"

[[features."{name}".candidates]]
impl = "torch"
entry = "bench:torch"
"""


def document(count: int, *, broken: bool = False) -> str:
    text = 'schema = "kernelpolicy.policy/v1"\n' + "".join(feature(i) for i in range(count))
    if broken:  # a mistake in the last feature: the loader must locate it
        text = text[: text.rindex('impl = "torch"')] + 'impl = "torch"\nspeed = 1\n'
    return text


def best(function: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(wall, CPU) seconds of the fastest of ``repeats`` runs. The CPU time of this process is
    reported beside the wall time because this machine is shared: other processes stretch the
    wall time, not the CPU time."""
    runs = []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        function()
        runs.append((time.perf_counter() - wall, time.process_time() - cpu))
    return min(runs)


def run(repeats: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for count in SIZES:
            path = Path(tmp, f"f{count}.toml")
            text = document(count)
            path.write_text(text)
            load = best(lambda p=path: load_policies([p]), repeats)
            parse = best(lambda t=text: tomllib.loads(t), repeats)
            rows.append(_row(f"{count} features", len(text), load, parse))
        broken = Path(tmp, "broken.toml")
        text = document(SIZES[-1], broken=True)
        broken.write_text(text)

        def load_broken() -> None:
            try:
                load_policies([broken])
            except PolicyError as exc:
                if exc.issues[0].line is None:
                    raise AssertionError(f"the mistake was not located: {exc}") from None
            else:
                raise AssertionError("the broken file loaded")

        load = best(load_broken, repeats)
        parse = best(lambda: tomllib.loads(text), repeats)
        rows.append(_row(f"{SIZES[-1]} features, one mistake", len(text), load, parse))
    return rows


def _row(
    what: str, size: int, load: tuple[float, float], parse: tuple[float, float]
) -> dict[str, object]:
    return {
        "what": what, "bytes": size, "load_s": load[0], "load_cpu_s": load[1],
        "tomllib_s": parse[0], "tomllib_cpu_s": parse[1], "ratio": load[0] / parse[0],
        "cpu_ratio": load[1] / parse[1],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--repeats", type=int, default=3, help="keep the best of this many")
    args = parser.parse_args()
    rows = run(args.repeats)
    if args.json:
        print(json.dumps({"machine": machine(), "rows": rows}, indent=2))
        return
    print(f"machine: {machine()}")
    print("seconds, best of the runs: wall (CPU of this process)")
    print(f"{'file':<32} {'MiB':>5} {'load_policies':>18} {'tomllib.loads':>18} {'ratio':>10}")
    for row in rows:
        print(
            f"{row['what']:<32} {row['bytes'] / 2**20:>5.2f} "  # type: ignore[operator]
            f"{row['load_s']:>8.3f} ({row['load_cpu_s']:.3f}) "
            f"{row['tomllib_s']:>8.3f} ({row['tomllib_cpu_s']:.3f}) "
            f"{row['ratio']:>4.2f} ({row['cpu_ratio']:.2f})"
        )


if __name__ == "__main__":
    main()
