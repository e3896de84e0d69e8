#!/usr/bin/env python3
"""Regenerate kernelpolicy/knobs/{vllm,sglang}.json: each engine release's knobs, from its wheel.

Usage: python scripts/gen_engine_tables.py [--engine vllm|sglang] [--cache DIR] [--jobs N]
                                           [--reuse-probes]

For every release in RELEASES it downloads the wheel without dependencies (``pip download
--no-deps``), keeps its ``.py`` files under ``--cache``, and runs ``engine_knobs_probe.py`` on
them in a fresh child process: the release's own ``envs.py`` parsers and argparse, with heavy
imports stubbed (``engine_stubs.py``), and the selection facts of ``engine_facts.py``. The
engine is never imported by kernelpolicy. Consecutive releases that agree on a knob share one
span, so the tables stay small. Needs ``msgspec`` and ``packaging`` (newer SGLang builds its
argparse from msgspec structs); about 20 GB of downloads, kept only as ``.py`` files (~1 GB).

Probing all 68 releases takes about 25 minutes on 2 cores; ``--reuse-probes`` rebuilds the tables
from the probes' outputs kept in ``--cache`` where they are newer than the probe scripts (a
change to this script alone).

Review the diff of ``kernelpolicy check`` and ``tests/golden/engine_settings.txt`` after
regenerating: every change is a knob an engine release reads differently.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from packaging.version import Version

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "kernelpolicy/knobs"
SCRIPTS = (
    "gen_engine_tables.py", "engine_knobs_probe.py", "engine_reads.py", "engine_stubs.py",
    "engine_facts.py",
)  # fmt: skip
SCHEMA = "kernelpolicy.engine-knobs/v1"

# Every minor release from vLLM 0.10 and SGLang 0.4.10 (its newest patch, and the first where a
# boundary needs it), the releases the bundled fixtures name, and the ones the reviews checked
# (vLLM 0.8.5.post1 and 0.9.2 read VLLM_ROCM_USE_AITER before 0.10; SGLang 0.4.5-0.4.9 hold the
# FlashInfer sampler API's and aiter's boundaries), and the other vLLM releases the seventh audit
# ran (0.15.0, 0.17.0, 0.18.0, 0.19.0, 0.20.1, 0.22.0, 0.27.0): a release the tables lack has its
# variables checked against the newest release below it (bridge/release.py).
RELEASES: dict[str, tuple[str, ...]] = {
    "vllm": (
        "0.7.3", "0.8.5.post1", "0.9.2", "0.10.0", "0.10.1", "0.10.2", "0.11.0", "0.11.1",
        "0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.14.1", "0.15.0", "0.15.1", "0.16.0",
        "0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.0", "0.19.1", "0.20.0", "0.20.1",
        "0.20.2", "0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1",
        "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0",
        "0.33.0",
    ),
    "sglang": (
        "0.4.3", "0.4.5", "0.4.6.post5", "0.4.9.post6", "0.4.10.post2", "0.5.1.post3", "0.5.2",
        "0.5.3", "0.5.3.post3",
        "0.5.4.post3", "0.5.5", "0.5.5.post3", "0.5.6", "0.5.6.post2", "0.5.7",
        "0.5.8.post1", "0.5.9", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13",
        "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18",
        "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23",
    ),
}  # fmt: skip

# What took over from a variable a release no longer defines (read from the releases where
# the old one disappears: arg_utils.py / server_args.py), for the operator's warning.
REPLACED: dict[str, dict[str, str]] = {
    "vllm": {
        "VLLM_ATTENTION_BACKEND": "--attention-backend (vllm/engine/arg_utils.py)",
        "VLLM_FLASH_ATTN_VERSION": "--attention-config '{\"flash_attn_version\": N}'",
        "VLLM_USE_FLASHINFER_MOE_FP8": "--moe-backend (KernelConfig.moe_backend)",
        "VLLM_USE_FLASHINFER_MOE_FP4": "--moe-backend (KernelConfig.moe_backend)",
        "VLLM_ROCM_USE_AITER_SAMPLER": "VLLM_ROCM_USE_AITER (vllm-project/vllm#43331)",
    },
    "sglang": {},
}


def generator_digest() -> str:
    """What the tables were made with: a test checks it against today's scripts."""
    digest = hashlib.sha256()
    for name in SCRIPTS:
        digest.update((HERE / name).read_bytes())
    return digest.hexdigest()


def source_tree(engine: str, release: str, cache: Path) -> Path:
    """The release's ``.py`` files, downloaded once."""
    tree = cache / f"{engine}-{release}"
    if tree.exists():
        return tree
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
             f"{engine}=={release}", "-d", tmp],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        (wheel,) = Path(tmp).glob("*.whl")
        part = tree.with_name(tree.name + ".part")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(part, [n for n in archive.namelist() if n.endswith(".py")])
        part.rename(tree)
    return tree


PROBE_SCRIPTS = ("engine_knobs_probe.py", "engine_reads.py", "engine_stubs.py", "engine_facts.py")


def probe(engine: str, release: str, cache: Path, *, reuse: bool = False) -> dict[str, Any]:
    """What the release's probe reads; with ``reuse``, a probe's output newer than every probe
    script is read back instead of probing again (the table itself is always rebuilt)."""
    tree = source_tree(engine, release, cache)
    out = cache / f"{engine}-{release}.knobs.json"
    newest_script = max((HERE / name).stat().st_mtime for name in PROBE_SCRIPTS)
    if reuse and out.exists() and out.stat().st_mtime > newest_script:
        return json.loads(out.read_text())  # type: ignore[no-any-return]
    done = subprocess.run(
        [sys.executable, str(HERE / "engine_knobs_probe.py"), engine, str(tree), str(out)],
        check=False, capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": tempfile.gettempdir(), "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{engine} {release}: probe failed:\n{done.stderr[-2000:]}")
    print(f"{engine} {release}: read", file=sys.stderr)
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def spans(releases: list[str], values: list[Any]) -> list[list[Any]]:
    """``[[first, last, value], ...]`` for runs of equal values; absent (None) runs dropped."""
    out: list[list[Any]] = []
    for index, (release, value) in enumerate(zip(releases, values, strict=True)):
        if value is None:
            continue
        if out and out[-1][2] == value and out[-1][1] == releases[index - 1]:
            out[-1][1] = release
        else:
            out.append([release, release, value])
    return out


# A variable's name as the engines spell them: a string such as "VLLM_" or "VLLM_DP_Coordinator"
# that the release's code holds (a prefix it matches, a thread name) is no variable.
_VARIABLE = re.compile(r"(?:VLLM|SGLANG|SGL)_[A-Z0-9_]*[A-Z0-9]")


def _variables(env: dict[str, Any]) -> dict[str, Any]:
    prefixed = ("VLLM_", "SGLANG_", "SGL_")
    return {n: v for n, v in env.items() if not n.startswith(prefixed) or _VARIABLE.fullmatch(n)}


def _env_entry(item: dict[str, Any] | None) -> dict[str, Any] | None:
    if item is None:
        return None
    return {"defined": item["defined"], "read": (item["read"] or [None])[0], "parse": item["parse"]}


def table(engine: str, probes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    releases = sorted(probes, key=Version)
    got = [probes[r] for r in releases]

    def knob(section: str, convert: Any = lambda v: v) -> dict[str, Any]:
        names = sorted({n for p in got for n in p.get(section, {})})
        rows = {n: [convert(p.get(section, {}).get(n)) for p in got] for n in names}
        return {n: spans(releases, values) for n, values in rows.items()}

    return {
        "schema": SCHEMA,
        "engine": engine,
        "generated_by": "scripts/gen_engine_tables.py",
        "generator_sha256": generator_digest(),
        "releases": releases,
        "env": knob("env", _env_entry),
        "options": knob("options"),
        "enums": knob("enums"),
        "facts": knob("facts"),
        "replaced": REPLACED[engine],
    }


def _as_recorded(probes: dict[str, dict[str, Any]]) -> None:
    """Each probe as the tables record it: an option that takes any value is ``[]`` (present),
    an absent one missing; names in the env section that are no variable leave it."""
    for result in probes.values():
        result["options"] = {k: v if v is not None else [] for k, v in result["options"].items()}
        result["env"] = _variables(result["env"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--engine", choices=sorted(RELEASES), action="append")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "engine-src")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--reuse-probes", action="store_true",
        help="read back each release's probe output where it is newer than the probe scripts",
    )  # fmt: skip
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    for engine in args.engine or sorted(RELEASES):
        with ThreadPoolExecutor(args.jobs) as pool:
            results = pool.map(
                lambda r, e=engine: (r, probe(e, r, args.cache, reuse=args.reuse_probes)),
                RELEASES[engine],
            )
            probes = dict(results)
        _as_recorded(probes)
        path = args.out / f"{engine}.json"
        path.write_text(json.dumps(table(engine, probes), sort_keys=True, indent=0) + "\n")
        print(f"wrote {path} ({len(probes)} releases)")


if __name__ == "__main__":
    main()
