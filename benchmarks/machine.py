"""The machine a benchmark ran on, as written next to its figures: they mean little without it."""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path


def describe() -> dict:
    """nproc (the CPUs this process may use), RAM, CPU model, OS, date, and the load at this moment."""
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "ram_gib": _mem_total_kb() / 2**20,
        "cpu": _cpu_model(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_average": os.getloadavg(),
    }


def _mem_total_kb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/meminfo has no MemTotal line")


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.processor() or "unknown"
