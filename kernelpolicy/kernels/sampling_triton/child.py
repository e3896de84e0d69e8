"""A background build of the sampler's variant, compiled in a child process and then loaded.

Triton's compiler (its frontend, MLIR and LLVM passes) holds the interpreter's lock in
stretches, so a variant compiled in a thread of the serving process stalled the calls served
meanwhile on the serving thread (review C2: up to 717 ms on an H200 during a 45 s build). A
background build of a variant on a device where Triton compiles (CUDA) therefore runs the
compile in a child process (``python -P -m kernelpolicy.kernels.sampling_triton.child_main
TASK``, started as ``kernelpolicy warm``'s children are: :mod:`kernelpolicy.kernels.
build_process`) with this process's Triton cache (``TRITON_CACHE_DIR``: the node's kernel
cache where one is in use, else Triton's default directory), and then the build thread loads
the variant from that cache: its eager call finds every kernel compiled.

A child that fails, or outlasts its seconds (it is killed), fails the variant; one that cannot
be started (no ``sys.executable``, no process to be had) leaves the compile to the thread, as
before. Only a sampler with the package's own kernels builds in a child (a child cannot have a
test's spies); the child builds the variant with the sampler's tuning, and where the kernel
cache is in use records it there as ``warm`` does (``cached.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from kernelpolicy.dtypes import dtype_name
from kernelpolicy.kernels.build_process import build_environment, python_command, run_build
from kernelpolicy.kernels.sampling_triton.tuning import Tuning
from kernelpolicy.kernels.sampling_triton.variants import Variant
from kernelpolicy.limits import MAX_BUILD_SECONDS

if TYPE_CHECKING:
    pass

__all__ = [
    "CannotStart",
    "Child",
    "command",
    "environment",
    "task_of",
    "variant_of",
]

MODULE = "kernelpolicy.kernels.sampling_triton.child_main"


class CannotStart(Exception):
    """No child process can be started here: the variant compiles in the build's thread."""


def command() -> list[str]:
    """The child's command line, before its task.

    Raises:
        CannotStart: this interpreter does not know its own executable (embedded).
    """
    if not sys.executable:
        raise CannotStart("sys.executable is empty")
    return python_command(sys.executable, MODULE)


def triton_cache_dir() -> str:
    """The directory this process's Triton reads and writes compiled kernels in."""
    import triton

    knobs = getattr(triton, "knobs", None)  # Triton >= 3.4: whatever set it, env or code
    if knobs is not None:
        return str(knobs.cache.dir)
    from triton.runtime.cache import default_cache_dir

    return os.environ.get("TRITON_CACHE_DIR", "").strip() or str(default_cache_dir())


def environment() -> dict[str, str]:
    """This process's environment, with its Triton cache named (the child compiles into the
    cache this process then reads) and this kernelpolicy first on the path (the child builds
    the same kernel sources; :func:`~kernelpolicy.kernels.build_process.build_environment`)."""
    return build_environment({**os.environ, "TRITON_CACHE_DIR": triton_cache_dir()})


def task_of(tuning: Tuning, variant: Variant) -> dict[str, Any]:
    """The child's task: the variant, and the tuning fields that differ from the default."""
    default = Tuning()
    changed = {
        field.name: getattr(tuning, field.name)
        for field in dataclasses.fields(Tuning)
        if getattr(tuning, field.name) != getattr(default, field.name)
    }
    k_dtype = None if variant.k_dtype is None else dtype_name(variant.k_dtype)
    return {
        "device": variant.device,
        "dtype": dtype_name(variant.dtype),
        "k_dtype": k_dtype,
        "rows": list(variant.rows),
        "vocab": variant.vocab,
        "size": variant.size,
        "tuning": changed,
    }


def variant_of(task: dict[str, Any]) -> tuple[Tuning, Variant]:
    """The tuning and variant of a task (:func:`task_of`)."""
    k_dtype = None if task["k_dtype"] is None else getattr(torch, task["k_dtype"])
    has_k, has_p, p_rows = (bool(flag) for flag in task["rows"])
    variant = Variant(
        str(task["device"]), getattr(torch, task["dtype"]), k_dtype, (has_k, has_p, p_rows),
        int(task["vocab"]), int(task["size"]),
    )  # fmt: skip
    return Tuning().replace(**task["tuning"]), variant


@dataclasses.dataclass(frozen=True)
class Child:
    """How a background build compiles a variant in a child process.

    Attributes:
        devices: The device types whose variants compile in a child (CUDA: Triton's
            interpreter, on CPU, has nothing to compile).
        command: The child's command line before its task (:func:`command`).
        environment: The child's environment (:func:`environment`).
        seconds: How long the child may take before it is killed and the variant failed.
    """

    devices: frozenset[str] = frozenset({"cuda"})
    command: Callable[[], list[str]] = command
    environment: Callable[[], dict[str, str]] = environment
    seconds: float = MAX_BUILD_SECONDS

    def takes(self, variant: Variant) -> bool:
        return torch.device(variant.device).type in self.devices

    def compile(self, task: dict[str, Any]) -> None:
        """Build ``task`` in a child process and wait for it.

        Raises:
            CannotStart: No process could be started (the thread compiles instead).
            RuntimeError: The child failed (its last words) or outlasted :attr:`seconds`.
        """
        try:
            done = run_build([*self.command(), json.dumps(task)], self.environment(), self.seconds)
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"its build process did not end within {self.seconds:g} s (killed)"
            ) from None
        except OSError as exc:  # fork or exec refused (EAGAIN, ENOMEM, a missing binary)
            raise CannotStart(f"{type(exc).__name__}: {exc}") from exc
        if done.code:
            said = (done.stdout.strip() or done.stderr.strip())[-300:]
            raise RuntimeError(f"its build process failed (exit {done.code}): {said}")
