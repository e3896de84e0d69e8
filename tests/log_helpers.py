"""What the tests of the library's logging share (tests/test_logs_host.py,
tests/test_settings_unknown.py): a host application's own handler on the ``kernelpolicy``
logger, installed for a test and taken away after, the logger as it was found."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

from kernelpolicy.logs import LOGGER_NAME


class Collect(logging.Handler):
    """A host application's own handler: keeps every record."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


Handler = TypeVar("Handler", bound=Collect)


@contextmanager
def host_logging(handler: Handler) -> Iterator[Handler]:
    """The ``kernelpolicy`` logger configured by a host (``handler`` on it, every level,
    nothing above), as it would any library's; its level and propagation put back after."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.addHandler(handler)
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
