#!/usr/bin/env python3
"""Regenerate the platform fixtures in kernelpolicy/fixtures from kernelpolicy.testing.MACHINES.

Usage: python scripts/gen_fixtures.py [--out DIR]

Writes roots/<name>/ (fake sysfs and torch trees) and platforms/<name>.json, each snapshot made
by the real probe from its fake root. ``h100-real.json`` came from real NVML and is left alone.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from kernelpolicy.platform.fixtures import fixture_dir
from kernelpolicy.testing.machines import MACHINES, probe_machine, write_root


def generate(out: Path) -> list[Path]:
    written = []
    for name, machine in MACHINES.items():
        root = out / "roots" / name
        shutil.rmtree(root, ignore_errors=True)
        write_root(machine, root)
        snapshot = out / "platforms" / f"{name}.json"
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        snapshot.write_text(probe_machine(machine, root).to_json() + "\n")
        written.append(snapshot)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, default=fixture_dir())
    args = parser.parse_args()
    for path in generate(args.out):
        print(path)


if __name__ == "__main__":
    main()
