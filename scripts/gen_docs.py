#!/usr/bin/env python3
"""Produce and check what README.md and docs/ show: CLI transcripts and generated tables.

A transcript is a fenced ```text block whose first line starts with ``$ kernelpolicy`` (or
``$ NAME=value kernelpolicy``: leading assignments set variables, PYTHONPATH is prepended). Each
``$`` line is run (``kernelpolicy`` as ``python -m kernelpolicy``, in the repository root, with a
clean environment: no ``KERNELPOLICY_*``, ``VLLM_*`` or ``SGLANG_*`` variables, a fresh HOME and
runtime directory) and its output (stdout and stderr) must be what the block shows.

A block whose output contains a line ``...`` (or ``...`` inside a line) is matched with that as a
wildcard, like doctest's ELLIPSIS, and is only checked, never rewritten; the others are rewritten
by ``python scripts/gen_docs.py`` and checked by ``--check`` (and by tests/test_docs.py).
A region ``<!-- generated: NAME -->`` ... ``<!-- end -->`` holds a table made by the function
registered under NAME in ``GENERATED`` (the built-in implementation names, for one).
``kernelpolicy serve`` runs in the background until it says where it serves; the block's
later commands (``kernelpolicy status``) then run against it, and it is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```text\n(\$ (?:[A-Z_]+=\S* )*kernelpolicy.*?)^```$", re.S | re.M)
_DROPPED_PREFIXES = ("KERNELPOLICY_", "VLLM_", "SGLANG_", "CUDA_VISIBLE", "ROCR_", "HIP_")
_TIMING = re.compile(r"\b\d+(?:\.\d+)?s\b")
_SPACES = re.compile(r" {2,}")
TIMEOUT_S = 300


@dataclass
class Block:
    """One transcript: where it is, and its (command, shown output) steps."""

    path: Path
    start: int
    end: int
    steps: list[tuple[str, str]]

    @property
    def has_wildcards(self) -> bool:
        return any("..." in output for _, output in self.steps)

    def render(self, outputs: list[str]) -> str:
        parts = []
        for (command, _), output in zip(self.steps, outputs, strict=True):
            parts.append(f"$ {command}\n{output}")
        return "".join(parts)


def doc_files() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> Iterator[Block]:
    text = path.read_text()
    for match in FENCE.finditer(text):
        steps: list[tuple[str, str]] = []
        for line in match.group(1).splitlines(keepends=True):
            if line.startswith("$ "):
                steps.append((line[2:].rstrip("\n"), ""))
            else:
                command, output = steps[-1]
                steps[-1] = (command, output + line)
        yield Block(path, match.start(1), match.end(1), steps)


def _environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_PREFIXES)}
    env.update(
        HOME=str(home),
        XDG_RUNTIME_DIR=str(home / "run"),
        XDG_CACHE_HOME=str(home / ".cache"),
        PYTHONPATH=str(ROOT),
        COLUMNS="100",
        NO_COLOR="1",
    )
    (home / "run").mkdir(mode=0o700, exist_ok=True)
    return env


def _split(command: str, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The command's argv and environment: leading ``NAME=value`` words set variables."""
    argv = shlex.split(command)
    env = dict(env)
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):
        name, _, value = argv.pop(0).partition("=")
        env[name] = f"{value}:{env[name]}" if name == "PYTHONPATH" else value
    if argv[0] == "kernelpolicy":
        argv = [sys.executable, "-m", "kernelpolicy", *argv[1:]]
    return argv, env


def _clean(text: str) -> str:
    return "".join(line.rstrip() + "\n" for line in text.splitlines())


def _start_server(
    command: str, env: dict[str, str], home: Path
) -> tuple[subprocess.Popen[str], str]:
    """Start ``kernelpolicy serve``; return it and what it printed until it serves."""
    port_file = home / "port"
    argv, env = _split(command, env)
    proc = subprocess.Popen(
        [*argv, "--port-file", str(port_file)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines = []
    deadline = time.monotonic() + 60
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("serving on"):
            break
    return proc, _clean("".join(lines))


def run_block(block: Block) -> list[str]:
    """Run a block's commands and return each one's output."""
    outputs = []
    server: subprocess.Popen[str] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        env = _environment(home)
        try:
            for command, _ in block.steps:
                argv, command_env = _split(command, env)
                if argv[1:4] == ["-m", "kernelpolicy", "serve"]:
                    server, output = _start_server(command, env, home)
                else:
                    done = subprocess.run(
                        argv, cwd=ROOT, env=command_env, text=True, timeout=TIMEOUT_S,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False,
                    )  # fmt: skip
                    output = _clean(done.stdout)
                outputs.append(output.replace(str(home), "~"))
        finally:
            if server is not None:
                server.terminate()
                server.communicate(timeout=30)
    return outputs


def matches(shown: str, actual: str) -> bool:
    """Whether ``actual`` is what ``shown`` shows: ``...`` is a wildcard, timings are free.

    Runs of spaces compare equal to one space, since a timing can widen a column.
    """
    # Timings vary, and with them the width of a table's columns.
    shown, actual = (_SPACES.sub(" ", _TIMING.sub("<t>", _clean(t))) for t in (shown, actual))
    if "..." not in shown:
        return shown == actual
    pattern = ".*?".join(re.escape(part) for part in shown.split("..."))
    return re.fullmatch(pattern, actual, flags=re.S) is not None


def stale(block: Block) -> list[str]:
    """The commands of ``block`` whose output is not what it shows."""
    outputs = run_block(block)
    return [
        f"{block.path.relative_to(ROOT)}: $ {command}\n--- shown\n{shown}--- actual\n{actual}"
        for (command, shown), actual in zip(block.steps, outputs, strict=True)
        if not matches(shown, actual)
    ]


def builtin_implementations() -> str:
    """The table of implementation names that need no ``entry``, from the code itself."""
    from kernelpolicy.policy.names import BUILTIN_ENTRIES, KNOWN_IMPLEMENTATIONS

    rows = ["| feature | implementation | provided by |", "|---|---|---|"]
    for feature, impls in sorted(KNOWN_IMPLEMENTATIONS.items()):
        for impl in sorted(impls):
            entry = BUILTIN_ENTRIES.get((feature, impl))
            rows.append(f"| `{feature}` | `{impl}` | {f'`{entry}`' if entry else 'the engine'} |")
    return "\n".join(rows) + "\n"


def bundled_features() -> str:
    """The bundled pack's features: implementations in order, the engines told, each
    candidate's source, from policies/ itself."""
    from kernelpolicy.policy.loader import load_policies
    from kernelpolicy.settings import bundled_policy_dir

    rows = ["| feature | implementations, preferred first | engines told | sources |",
            "|---|---|---|---|"]  # fmt: skip
    for name, feature in load_policies([bundled_policy_dir()]).features.items():
        impls = ", ".join(f"`{c.impl}`" for c in feature.candidates)
        engines = sorted({e for c in feature.candidates for e in c.engines} | set(feature.engines))
        sources = "; ".join(
            f"`{c.impl}`: {c.spec.reference}" for c in feature.candidates if c.spec.reference
        )
        rows.append(
            f"| `{name}` | {impls} | {', '.join(engines) or '-'} | {sources.replace('|', '/')} |"
        )
    return "\n".join(rows) + "\n"


GENERATED = {
    "built-in-implementations": builtin_implementations,
    "bundled-features": bundled_features,
}
_REGION = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(<!-- end -->)", re.S)


def regenerate(text: str) -> str:
    """``text`` with every generated region made anew."""
    return _REGION.sub(lambda m: m.group(1) + GENERATED[m.group(2)]() + m.group(4), text)


def rewrite(path: Path) -> int:
    """Rewrite every exact transcript of ``path`` with what its commands print now."""
    text = path.read_text()
    changed = 0
    if (regenerated := regenerate(text)) != text:
        text, changed = regenerated, 1
        path.write_text(text)
    for block in reversed(list(blocks(path))):
        if block.has_wildcards:
            continue
        new = block.render(run_block(block))
        if new != text[block.start : block.end]:
            text = text[: block.start] + new + text[block.end :]
            changed += 1
    path.write_text(text)
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when stale")
    args = parser.parse_args()
    if args.check:
        problems = [p for path in doc_files() for b in blocks(path) for p in stale(b)]
        problems += [
            f"{path.relative_to(ROOT)}: a generated table is stale"
            for path in doc_files()
            if regenerate(path.read_text()) != path.read_text()
        ]
        print("\n".join(problems) or "all transcripts current")
        return 1 if problems else 0
    for path in doc_files():
        if count := rewrite(path):
            print(f"{path.relative_to(ROOT)}: {count} transcript(s) rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
