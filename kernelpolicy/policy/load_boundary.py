"""The loader's one error boundary: whatever goes wrong while loading becomes a PolicyError.

Every public entry of the loader (``policy_files``, ``read_policy_sources``,
``load_policy_sources`` and the functions built on them) runs inside :func:`boundary`, so an
exception nobody anticipated (a ``ZeroDivisionError`` in a library, a ``RecursionError``, a
panic of native code) still reaches the caller as a located :class:`PolicyError`, never as a
traceback and never as something a reload loop does not expect. Errors that are already part
of the tree (``PolicyError``, ``UntrustedFileError``) pass unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kernelpolicy.errors import KernelPolicyError, PolicyError, PolicyIssue
from kernelpolicy.limits import shown


@dataclass
class Cursor:
    """What the loader is working on, so that an unexpected error can say where it happened."""

    file: str = "<policies>"
    feature: str | None = None
    key: str | None = None
    line: int | None = None

    def at(self, file: str, feature: str | None = None, key: str | None = None) -> None:
        self.file, self.feature, self.key, self.line = file, feature, key, None


_PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit)


@contextmanager
def boundary(cursor: Cursor | None = None) -> Iterator[Cursor]:
    """Run a loader step; translate any exception outside the error tree into a PolicyError.

    Yields:
        The cursor to keep up to date (a fresh one when none is given).

    Raises:
        PolicyError: Located at the cursor, naming the unexpected exception.
    """
    cursor = cursor if cursor is not None else Cursor()
    try:
        yield cursor
    except KernelPolicyError:
        raise
    except _PASS_THROUGH:
        raise
    except BaseException as exc:  # the one translation point; pyo3 panics are BaseExceptions
        message = f"cannot be loaded: {type(exc).__name__}: {shown(str(exc), 200)}"
        raise PolicyError(
            [PolicyIssue(cursor.file, message, cursor.line, cursor.feature, cursor.key)]
        ) from exc
