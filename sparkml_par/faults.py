"""Faults the reliability tests inject on purpose, named by environment variables on the driver.

The launcher hands every SPARKML_PAR_FAULT_* variable of the driver to the ranks (Spark's Python workers
do not see the driver's environment). Unset, each check costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

PREFIX = "SPARKML_PAR_FAULT_"
# "<rank>": that rank sleeps before joining the rendezvous (a stalled rank).
STALL_BEFORE_RENDEZVOUS = PREFIX + "STALL_BEFORE_RENDEZVOUS"
# "<rank>:<epoch>:<step>[:<marker file>]": that rank SIGKILLs its own process at that 1-based epoch and
# step; with a marker file, only while the file does not exist (it is created first), i.e. once.
KILL_AT_STEP = PREFIX + "KILL_AT_STEP"


def forwarded() -> dict[str, str]:
    """The driver's fault variables, for the ranks."""
    return {name: value for name, value in os.environ.items() if name.startswith(PREFIX)}


def kill_if_planned(rank: int, epoch: int, step: int) -> None:
    planned = os.environ.get(KILL_AT_STEP)
    if not planned:
        return
    target_rank, target_epoch, target_step, *marker = planned.split(":", 3)
    if (rank, epoch, step) != (int(target_rank), int(target_epoch), int(target_step)):
        return
    if marker:
        if Path(marker[0]).exists():
            return
        Path(marker[0]).touch()
    os.kill(os.getpid(), signal.SIGKILL)
