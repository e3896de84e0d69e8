"""``kernelpolicy verify`` run again in a child process whose environment carries the node's
kernel cache, so that FlashInfer builds into it and loads from it.

FlashInfer reads its JIT workspace (``FLASHINFER_WORKSPACE_BASE``) from the environment when it
is imported, and has no setting of its own that could point it elsewhere; and kernelpolicy
writes nothing into its own environment (STYLE.md). So a verify run that compiles (a GPU run)
where the trusted kernel cache's FlashInfer variable is not set runs the same command again in
a child whose environment is its own plus the cache's variables that it does not set
(``kernel_cache.cache_environment``: one you set is kept), as ``kernelpolicy exec`` gives an
engine's workers the cache. The child finds both variables set and runs the suite itself: it
never starts another.

The child is ``python -P -m kernelpolicy verify ...`` (:mod:`kernelpolicy.kernels.
build_process`: kernelpolicy found where this process found it, and no directory on its path
that this process's did not have), started in this process's current directory (the command
is yours, run again where you ran it: a relative ``--out`` means what it meant) with no
standard input. Its stdout and stderr are this process's, and its exit status is verify's (a
child killed by a signal: 128 + the signal, as a shell says it). A Ctrl-C at a terminal reaches
both (one process group); an interrupt this process alone gets is passed on, and a child that
has not ended :data:`INTERRUPT_SECONDS` after it is killed.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.kernels.build_process import build_environment, python_command

__all__ = ["INTERRUPT_SECONDS", "command", "environment", "run"]

INTERRUPT_SECONDS = 30.0  # verify exits at its next Python line on SIGINT: longer is a hang
_REPEATED = (("--feature", "feature"), ("--impl", "impl"))
_VALUED = (("--entry", "entry"), ("--guard", "guard"), ("--device", "device"), ("--out", "out"))
_SWITCHES = (("--no-store", "no_store"), ("--quick", "quick"), ("--json", "json"))


def command(args: argparse.Namespace) -> list[str]:
    """The verify command that ``args`` were parsed from, for the child: every option given,
    each value as ``--option=VALUE`` (a value that starts with '-' stays a value).

    Raises:
        KernelPolicyError: this interpreter does not know its own executable (embedded).
    """
    if not sys.executable:
        raise KernelPolicyError(
            "kernelpolicy verify cannot start itself again with the kernel cache's "
            "FLASHINFER_WORKSPACE_BASE (sys.executable is empty); set it yourself to "
            "<cache dir>/kernels/flashinfer, or to any directory, and run verify again"
        )
    argv = ["verify"]
    for option, dest in _REPEATED:
        argv += [f"{option}={value}" for value in getattr(args, dest) or ()]
    for option, dest in _VALUED:
        value = getattr(args, dest)
        argv += [] if value is None else [f"{option}={value}"]
    argv += [option for option, dest in _SWITCHES if getattr(args, dest)]
    return [*python_command(sys.executable, "kernelpolicy"), *argv]


PARENT_SAID = "_KERNELPOLICY_VERIFY_PARENT_SAID"
"""Set to ``1`` in the child's environment: its parent has said what reading the settings and
looking for the kernel cache say (a misspelt ``KERNELPOLICY_*`` variable, a cache not used),
read from this same environment, so the child does not say it again. Not a ``KERNELPOLICY_*``
name: no setting, and not itself said as unknown."""


def environment(environ: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """The child's environment: ``environ`` (read, never written) with ``extra`` (the cache's
    variables it does not set), :data:`PARENT_SAID`, and kernelpolicy's own directory first on
    ``PYTHONPATH`` (:func:`~kernelpolicy.kernels.build_process.build_environment`)."""
    return build_environment({**environ, **extra, PARENT_SAID: "1"})


def parent_said(environ: Mapping[str, str]) -> bool:
    """Whether this process is such a child (:data:`PARENT_SAID`)."""
    return environ.get(PARENT_SAID) == "1"


def run(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run ``argv`` with ``env`` in the current directory, its output this process's own, and
    wait for it.

    Returns:
        Its exit status; 128 + N where signal N ended it.

    Raises:
        OSError: It could not be started (fork or exec refused).
    """
    sys.stdout.flush()  # what was said before it comes before what it says
    sys.stderr.flush()
    process = subprocess.Popen(list(argv), env=dict(env), stdin=subprocess.DEVNULL)
    try:
        code = process.wait()
    except KeyboardInterrupt:
        code = _interrupted(process)
    return code if code >= 0 else 128 - code


def _interrupted(process: subprocess.Popen[bytes]) -> int:
    """Pass the interrupt on (at a terminal it already has it: a second one is ignored while it
    exits on the first) and wait for it to end, killing it past :data:`INTERRUPT_SECONDS`."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGINT)
    try:
        return process.wait(INTERRUPT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()
