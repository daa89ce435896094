"""Driver logging: compact text lines for people, JSON lines for schedulers that parse them."""

from __future__ import annotations

import json
import logging
import os
import stat
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
    # py4j logs every gateway connection at INFO, matplotlib the font cache it builds on a first run:
    # noise on the driver.
    for name in ("py4j", "matplotlib"):
        logging.getLogger(name).setLevel(logging.WARNING)


def stderr_apart_under_spark_submit() -> None:
    """Points a spark-submit job's stderr back at spark-submit's own, so log and error lines stay on stderr.

    spark-submit's PythonRunner merges the job's stderr into its stdout (it redirects the error stream),
    so without this `2>/dev/null` hides nothing and `> out` captures the log. Only on Linux (through
    /proc), and only when spark-submit's stderr is a terminal or a pipe: a regular file opened a second
    time would be written at a second offset, overwriting the JVM's own lines.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # set by PythonRunner for the job it starts
        return
    parent = f"/proc/{os.getppid()}"
    try:
        with open(f"{parent}/comm") as comm:
            if comm.read().strip() != "java":
                return
        if stat.S_ISREG(os.stat(f"{parent}/fd/2").st_mode):
            return
        fd = os.open(f"{parent}/fd/2", os.O_WRONLY)
    except OSError:
        return
    sys.stderr.flush()
    os.dup2(fd, 2)
    os.close(fd)
