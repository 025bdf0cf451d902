"""librdkafka's in-memory mock cluster (``test.mock.num.brokers=1``), the reference broker of the
differential tests and of bench/kafka_wire.py. It lives in the client that made it, and says
where it listens only in that client's log."""

from __future__ import annotations

import logging
import re


class MockAddress(logging.Handler):
    """Picks the mock cluster's address out of librdkafka's log lines."""

    def __init__(self) -> None:
        super().__init__()
        self.address = ""

    def emit(self, record: logging.LogRecord) -> None:
        found = re.search(r"replaced with (\S+)", record.getMessage())
        if found:
            self.address = found[1].rstrip(",")


def mock_logger(name: str) -> tuple[logging.Logger, MockAddress]:
    """A logger to give a client as ``logger``, and the handler that will know the address."""
    found = MockAddress()
    logger = logging.getLogger(name)
    logger.addHandler(found)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger, found
