"""Decision logs: one structlog event per resolution, and a warning per runtime fallback.

Two destinations. Inside someone else's process (``kernelpolicy.resolve()`` in a worker) events
go through the standard :mod:`logging` module, to the ``kernelpolicy`` logger, rendered by
structlog into the record's message (JSON or ``key=value``), with the event's fields also on the
record as ``record.kernelpolicy``: the host's logging configuration decides levels, handlers and
format, as for any library. A library is silent until its host configures logging (the standard
library's convention): the ``kernelpolicy`` logger carries a :class:`logging.NullHandler`, so
Python's last-resort handler never prints our warnings to an unconfigured host's stderr, and an
event no handler of the host would take is not even rendered. The CLI and the daemon own their
process and write their own lines (:func:`get_logger`: console or JSON, on stderr); what the
library says while a command runs reaches stderr too, through :func:`warnings_on_stderr`.

structlog is imported on first use only (with rich installed it costs ~100 ms), and loggers are
built per call site rather than through structlog's process-global configuration, so embedding
kernelpolicy never changes the host application's logging.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from functools import cache
from typing import Any, TextIO

from kernelpolicy.limits import shown


@cache
def _logger(fmt: str, stream: TextIO) -> Any:
    import structlog

    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=True)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    return structlog.wrap_logger(
        structlog.PrintLogger(file=stream),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
    )


def get_logger(fmt: str, stream: TextIO | None = None) -> Any:
    """A structlog logger writing ``fmt`` (``json`` or ``console``) to ``stream`` (stderr)."""
    return _logger(fmt, stream or sys.stderr)


LOGGER_NAME = "kernelpolicy"
"""The standard-library logger in-process events go to."""


@cache
def host_logger(fmt: str) -> Any:
    """A structlog logger that renders ``fmt`` (``json`` or ``console``) into records of the
    standard ``kernelpolicy`` logger; events below the logger's effective level are dropped
    before they are rendered."""
    import structlog

    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=True)
        if fmt == "json"
        else structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True)
    )

    def to_record(logger: Any, method: str, event: MutableMapping[str, Any]) -> Mapping[str, Any]:
        fields = dict(event)
        extra = {"kernelpolicy": fields, "kernelpolicy_format": fmt}
        return {"msg": renderer(logger, method, event), "extra": extra}

    import logging

    return structlog.wrap_logger(
        logging.getLogger(LOGGER_NAME),
        wrapper_class=structlog.stdlib.BoundLogger,
        processors=[structlog.stdlib.filter_by_level, to_record],
    )


def quiet_library() -> None:
    """Give the ``kernelpolicy`` logger its :class:`logging.NullHandler` (once).

    Done on first use rather than at import: a host that never imports :mod:`logging` does
    not pay for it (about 4 ms of a cold start), and it has configured nothing anyway."""
    import logging

    logger = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


def _host_wants(level: int) -> bool:
    """Whether the host's logging would show an event of ``level`` (a :mod:`logging` level):
    the ``kernelpolicy`` logger is enabled for it and some handler other than our
    :class:`~logging.NullHandler` would receive it (the host's, on the logger or above it).

    A host that never imported :mod:`logging` has configured nothing: dropped at once."""
    if "logging" not in sys.modules:
        return False
    import logging

    quiet_library()
    logger: logging.Logger | None = logging.getLogger(LOGGER_NAME)
    if not logger or not logger.isEnabledFor(level):
        return False
    while logger is not None:
        if any(
            not isinstance(h, logging.NullHandler) and level >= h.level for h in logger.handlers
        ):
            return True
        logger = logger.parent if logger.propagate else None
    return False


_TERMINALS = [0]  # warnings_on_stderr blocks open (the CLI's command), counted by it alone
_DROPPING = [0]  # warnings_dropped blocks open, counted by it alone


def log_warning(event: str, fmt: str, *, to_terminal: bool = False, **fields: Any) -> None:
    """A warning of the library, in-process: to the host's logging where it would show one
    (nothing is even rendered otherwise), never when ``fmt`` is ``off``, except where
    ``to_terminal`` and a person reads the CLI's stderr (:func:`warnings_on_stderr`): a
    misspelt variable is said to whoever typed the command, whatever the decision log's
    format, as the CLI's own warnings are."""
    if _DROPPING[0]:
        return
    if fmt == "off":
        if not (to_terminal and _TERMINALS[0]):
            return
        fmt = "console"
    if _host_wants(30):  # logging.WARNING
        host_logger(fmt).warning(event, **fields)


@contextmanager
def warnings_on_stderr(stream: TextIO | None = None) -> Iterator[None]:
    """Within it, the library's warnings and errors (the ``kernelpolicy`` logger's) are written
    on ``stream`` (default: stderr, looked up at each line) as the CLI writes its own: a console
    event as ``kernelpolicy: warning: MESSAGE`` (its ``message`` field, else the event), a JSON
    event as its JSON line. For a process that owns its terminal, the CLI: it wraps each command
    in this, so that what the library says to a host's logging (a misspelt
    ``KERNELPOLICY_*`` variable) reaches the person who typed the command; the handler goes
    when the block ends, leaving the process's logging as it found it."""
    import logging

    class Terminal(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            out = stream or sys.stderr
            fields = getattr(record, "kernelpolicy", None) or {}
            if getattr(record, "kernelpolicy_format", None) == "json":
                print(record.getMessage(), file=out, flush=True)
                return
            text = fields.get("message") or record.getMessage()
            print(f"kernelpolicy: {record.levelname.lower()}: {text}", file=out, flush=True)

    quiet_library()
    handler = Terminal(logging.WARNING)
    logger = logging.getLogger(LOGGER_NAME)
    logger.addHandler(handler)
    _TERMINALS[0] += 1
    try:
        yield
    finally:
        _TERMINALS[0] -= 1
        logger.removeHandler(handler)


@contextmanager
def warnings_dropped(dropping: bool = True) -> Iterator[None]:
    """Within it (``dropping``), the library's warnings are dropped: for a process whose parent
    already said them (``verify``'s child, ``cli.verify_child.PARENT_SAID``)."""
    _DROPPING[0] += dropping
    try:
        yield
    finally:
        _DROPPING[0] -= dropping


def log_runtime_fallback(feature: str, note: str, fmt: str = "console") -> None:
    """A kernel that failed at run time and the fallback now used: a warning, in-process."""
    log_warning("kernelpolicy.runtime_fallback", fmt, feature=feature, note=note)


def runtime_log(fmt: str) -> Callable[[str, str], None] | None:
    """What a Resolution calls with (feature, note) for each run-time change: the warning
    above in ``fmt`` (None when ``off``)."""
    if fmt == "off":
        return None
    return lambda feature, note: log_runtime_fallback(feature, note, fmt)


_EVENT_TEXT_CHARS = 200
_EVENT_ENTRIES = 32


def bounded(value: Any) -> Any:
    """``value`` as an event carries it: each string cut to ``_EVENT_TEXT_CHARS`` (a dict's keys
    too), each list and dict to its first ``_EVENT_ENTRIES`` entries and a last one counting
    the rest (``"(N more)"``), nested values the same way. A resolution's line stays a few
    KiB whatever the policies say (how many features, how long an error)."""
    if isinstance(value, str):
        return shown(value, _EVENT_TEXT_CHARS)
    if isinstance(value, Mapping):
        items = list(value.items())
        kept: dict[str, Any] = {
            shown(str(k), _EVENT_TEXT_CHARS): bounded(v) for k, v in items[:_EVENT_ENTRIES]
        }
        if len(items) > _EVENT_ENTRIES:
            kept["(more)"] = f"({len(items) - _EVENT_ENTRIES} more)"
        return kept
    if isinstance(value, list | tuple):
        listed = [bounded(v) for v in value[:_EVENT_ENTRIES]]
        more = len(value) - _EVENT_ENTRIES
        return [*listed, f"({more} more)"] if more > 0 else listed
    return value


def log_resolution(fields: Mapping[str, Any], fmt: str, stream: TextIO | None = None) -> None:
    """Emit the one ``kernelpolicy.resolved`` event of a resolution (``fields``: what
    ``Resolution.log_fields()`` gives, or ``resolve()``'s own view of it; nothing when ``fmt``
    is ``off``), each field :func:`bounded`: to ``stream`` when one is given, else to the
    standard ``kernelpolicy`` logger. Its level is error when ``errors`` names any, warning when
    ``warnings`` does, else info (whatever else the fields carry)."""
    if fmt == "off":
        return
    errors, warnings = fields.get("errors"), fields.get("warnings")
    # logging.ERROR, WARNING, INFO
    if stream is None and not _host_wants(40 if errors else 30 if warnings else 20):
        return  # dropped anyway: not even structlog is imported (it costs ~85 ms cold)
    log = get_logger(fmt, stream) if stream is not None else host_logger(fmt)
    emit = log.error if errors else log.warning if warnings else log.info
    emit("kernelpolicy.resolved", **{name: bounded(value) for name, value in fields.items()})
