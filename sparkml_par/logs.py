"""Driver logging: compact text lines for people, JSON lines for schedulers that parse them."""

from __future__ import annotations

import json
import logging
import sys

_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_DATE_FORMAT = "%H:%M:%S"


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time, so replacing it (pytest, notebooks) just works."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def setup_logging(quiet: bool = False, fmt: str = "text") -> None:
    """INFO (WARNING when quiet) to stderr as text or JSON; calling it again replaces the earlier setup."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(_JsonFormatter() if fmt == "json" else logging.Formatter(_TEXT_FORMAT, _DATE_FORMAT))
    root.addHandler(handler)
    root.setLevel(logging.WARNING if quiet else logging.INFO)
    # py4j logs every gateway connection at INFO: noise on the driver.
    logging.getLogger("py4j").setLevel(logging.WARNING)
