#!/usr/bin/env python3
"""Read one inference-engine release's knobs from its own source tree; write them as JSON.

Usage: python scripts/engine_knobs_probe.py vllm|sglang SOURCE_DIR OUT_JSON

Run by ``scripts/gen_engine_tables.py`` in a fresh child process per release (it imports the
release's modules, with heavy third-party imports stubbed by ``engine_stubs``). What it reads:

* ``env``: every ``VLLM_*`` / ``SGLANG_*`` / ``SGL_*`` variable the release defines or its code
  names, the modules other than its definition whose code uses it (``engine_reads``: not a
  comment, a docstring or a value stored where nothing uses it), and what the release's own
  parser makes of the values "", "0" to "4", "true", "false" and "x" (vLLM: the ``envs.py``
  functions; SGLang: its ``environ.py`` fields and ``get_bool_env_var``);
* ``options``: every command-line option of its real argparse (vLLM: ``EngineArgs``; SGLang:
  ``ServerArgs``) with its choices;
* ``enums``: the attention-backend enum's members;
* ``facts``: what the bundled pack's rules depend on (see ``FACTS``), each with its file.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import inspect
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engine_facts import FACTS  # beside these scripts, on their path
from engine_reads import source_of

PROBE_VALUES = ("", "0", "1", "2", "3", "4", "true", "false", "x")
REAL = {"msgspec", "typing_extensions", "pydantic", "pydantic_core", "annotated_types"}
REAL |= {"typing_inspection", "packaging", "engine_stubs", "engine_knobs_probe"}
ABSENT = {"torch_npu", "habana_frameworks", "intel_extension_for_pytorch", "torch_xla"}
# vLLM 0.8.5-0.9.2 detect TPU and Neuron machines by importing these (platforms/__init__.py)
ABSENT |= {"libtpu", "transformers_neuronx"}
PREFIXES = {"vllm": ("VLLM_",), "sglang": ("SGLANG_", "SGL_")}


def python_files(root: Path, package: str) -> list[Path]:
    """The release's modules, tests and benchmarks left out."""
    skip = {"test", "tests", "benchmarks", "testing"}
    return sorted(
        p for p in (root / package).rglob("*.py") if not skip & set(p.relative_to(root).parts)
    )


def shown(value: Any) -> Any:
    """A probe result as JSON: plain values as they are, anything else by its repr."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value[:60]
    return {"repr": repr(value)[:60]}


@contextlib.contextmanager
def environ(name: str, value: str | None) -> Iterator[None]:
    old = os.environ.pop(name, None)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)
        if old is not None:
            os.environ[name] = old


def probe(read: Callable[[], Any], name: str) -> dict[str, Any]:
    """What ``read`` returns with ``name`` unset and set to each probe value."""
    out: dict[str, Any] = {}
    for value in (None, *PROBE_VALUES):
        with environ(name, value):
            try:
                out["unset" if value is None else value] = shown(read())
            except Exception as exc:  # the release's own parser refused the value
                out["unset" if value is None else value] = {"error": type(exc).__name__}
    return out


def vllm_env(root: Path) -> tuple[dict[str, Any], str]:
    envs = importlib.import_module("vllm.envs")
    table: dict[str, Callable[[], Any]] = envs.environment_variables
    return {name: probe(read, name) for name, read in table.items()}, "vllm/envs.py"


def _sglang_bool_reader(root: Path) -> Callable[[str], bool] | None:
    """The release's own ``get_bool_env_var``: imported where its module imports, else its
    definition run alone (0.5.17-0.5.23's ``srt.utils`` does not import under the stubs, and
    a stub object is no parser)."""
    for module in ("sglang.srt.utils.common", "sglang.srt.utils"):
        with contextlib.suppress(Exception):
            found = getattr(importlib.import_module(module), "get_bool_env_var", None)
            if inspect.isfunction(found) and found.__module__.startswith("sglang."):
                return found
    for path in (root / "sglang/srt/utils/common.py", root / "sglang/srt/utils.py"):
        if path.exists():
            return _defined_alone(path, "get_bool_env_var")
    return None


def _defined_alone(path: Path, name: str) -> Callable[[str], bool] | None:
    """Function ``name`` of ``path``, compiled alone with ``os`` and a silent ``logger``."""
    tree = ast.parse(path.read_text(errors="replace"))
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not nodes:
        return None
    body: list[ast.stmt] = [
        ast.Assign(
            targets=[ast.Name(t, ast.Store())],
            value=ast.Call(ast.Name("set", ast.Load()), [], []),
            lineno=0,
        )
        for t in _warned_sets(tree)
    ]
    module = ast.Module(body=[*body, *nodes], type_ignores=[])
    ast.fix_missing_locations(module)
    space: dict[str, Any] = {"os": os, "logger": _Silent()}
    exec(compile(module, str(path), "exec"), space)  # the release's own parser, nothing else
    return space[name]  # type: ignore[no-any-return]


def _warned_sets(tree: ast.Module) -> list[str]:
    """Module-level ``x = set()`` names (the warned-once sets the parser updates)."""
    return [
        t.id for n in tree.body if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Call) and getattr(n.value.func, "id", None) == "set"
        for t in n.targets if isinstance(t, ast.Name)
    ]  # fmt: skip


class _Silent:
    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def sglang_env(root: Path) -> tuple[dict[str, Any], str]:
    out: dict[str, Any] = {}
    declared: dict[str, Any] = {}
    if (root / "sglang/srt/environ.py").exists():
        environ_module = importlib.import_module("sglang.srt.environ")
        fields = vars(type(environ_module.envs))
        declared = {k: v for k, v in fields.items() if k.startswith(PREFIXES["sglang"])}
    for name in declared:
        field = getattr(environ_module.envs, name)
        out[name] = probe(field.get, name)
    bool_reader = _sglang_bool_reader(root)
    pattern = re.compile(r"get_bool_env_var\(\s*[\"']((?:SGLANG|SGL)_[A-Z0-9_]+)[\"']")
    for path in python_files(root, "sglang"):
        for name in pattern.findall(path.read_text(errors="replace")):
            if name not in out and bool_reader is not None:
                out[name] = probe(lambda n=name: bool_reader(n), name)
    plain = re.compile(
        r"(?:os\.getenv|os\.environ\.get|os\.environ\[|get_int_env_var|get_str_env_var)"
        r"\(?\s*[\"']((?:SGLANG|SGL)_[A-Z0-9_]+)[\"']"
    )
    for path in python_files(root, "sglang"):
        for name in plain.findall(path.read_text(errors="replace")):
            out.setdefault(name, {"parse": "read as a plain string or int at its use"})
    return out, "sglang/srt/environ.py"


def options(engine: str) -> dict[str, list[str] | None]:
    """Option -> its choices (None: any value) from the release's own argparse."""
    if engine == "vllm":
        parser = _vllm_parser()
    else:
        _fake_platform("sglang.srt.platforms", "sglang/srt/platforms/__init__.py")
        server_args = importlib.import_module("sglang.srt.server_args")
        parser = argparse.ArgumentParser(allow_abbrev=False)  # the release's own options only
        server_args.ServerArgs.add_cli_args(parser)
    out: dict[str, list[str] | None] = {}
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--"):
                choices = action.choices
                out[option] = sorted(str(c) for c in choices if c is not None) if choices else None
    return out


def _fake_platform(module: str, relative: str) -> None:
    """Set the release's lazily detected current platform to a placeholder CUDA GPU (only its
    argparse is built; detection would fail on this machine)."""
    import engine_stubs

    class _Platform(engine_stubs.Base):
        device_type = device_name = "cuda"
        dispatch_key = "CUDA"

        def is_cuda(self) -> bool:
            return True

        def is_cuda_alike(self) -> bool:
            return True

    if Path(sys.path[0], relative).exists():
        platforms = importlib.import_module(module)
        if hasattr(platforms, "_current_platform"):
            platforms._current_platform = _Platform()


def _vllm_parser() -> argparse.ArgumentParser:
    _fake_platform("vllm.platforms", "vllm/platforms/__init__.py")
    arg_utils = importlib.import_module("vllm.engine.arg_utils")
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser
    for module in ("vllm.utils.argparse_utils", "vllm.utils"):
        with contextlib.suppress(Exception):
            parser_class = importlib.import_module(module).FlexibleArgumentParser
            break
    parser = parser_class()
    arg_utils.EngineArgs.add_cli_args(parser)
    return parser


def attention_backends(root: Path) -> tuple[list[str], str] | None:
    """Members of the attention-backend enum, read from its class body."""
    candidates = [
        ("vllm/v1/attention/backends/registry.py", "AttentionBackendEnum"),
        ("vllm/attention/backends/registry.py", "AttentionBackendEnum"),
        ("vllm/attention/backends/registry.py", "_Backend"),
        ("vllm/platforms/interface.py", "_Backend"),
    ]
    for relative, cls in candidates:
        path = root / relative
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name == cls:
                names = [
                    t.id
                    for stmt in node.body
                    if isinstance(stmt, ast.Assign)
                    for t in stmt.targets
                    if isinstance(t, ast.Name) and t.id.isupper()
                ]
                if names:
                    return names, relative
    return None


def main() -> None:
    engine, source, out = sys.argv[1], Path(sys.argv[2]).resolve(), Path(sys.argv[3])
    sys.path.insert(0, str(source))
    import engine_stubs

    tolerant = engine_stubs.install(
        engine, {f"{engine}.engine.arg_utils", f"{engine}.srt.server_args"}, REAL, ABSENT
    )
    env, env_file = vllm_env(source) if engine == "vllm" else sglang_env(source)
    code = source_of(source, python_files(source, engine))
    names = set(env) | {n for n in code.uses if n.startswith(PREFIXES[engine])}
    env_out = {
        name: {
            "defined": name in env,
            "read": code.read_in(name, env_file)[:3],
            "parse": env.get(name),
        }
        for name in sorted(names)
    }
    result: dict[str, Any] = {
        "env": env_out,
        "env_file": env_file,
        "options": options(engine),
        "facts": {name: fact(source) for name, fact in FACTS[engine].items()},
    }
    backends = attention_backends(source) if engine == "vllm" else None
    if backends is not None:
        result["enums"] = {"attention_backend": {"members": backends[0], "file": backends[1]}}
    result["import_failures"] = sorted(tolerant.failed)
    out.write_text(json.dumps(result, sort_keys=True))  # not stdout: the release logs there


if __name__ == "__main__":
    main()
