#!/usr/bin/env python3
"""Regenerate tests/golden/engine_settings.txt: what vLLM and SGLang are told on every fixture.

Usage: python scripts/gen_engine_golden.py [--out FILE]

Review the diff before committing: every line is a setting an inference engine will receive.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kernelpolicy.testing.engine_golden import render_golden

GOLDEN = Path(__file__).resolve().parent.parent / "tests/golden/engine_settings.txt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, default=GOLDEN)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render_golden())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
