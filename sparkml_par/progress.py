"""Spark job progress on the driver while a stage runs: which Spark stages are active, how far along.

Spark's console bar is turned off on the embedded default (it overwrites log lines); this logs one
line whenever the picture changes, at most every `interval` seconds.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Iterator

log = logging.getLogger("sparkml_par.spark")


def describe_active_stages(tracker) -> str:
    parts = []
    for stage_id in sorted(tracker.getActiveStageIds()):
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            parts.append(f"stage {stage_id} ({info.name.split(' at ')[0]}) "
                         f"{info.numCompletedTasks}/{info.numTasks} tasks, {info.numActiveTasks} running")
    return "; ".join(parts)


@contextlib.contextmanager
def spark_progress(spark, interval: float = 10.0) -> Iterator[None]:
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()

    def poll() -> None:
        last = ""
        while not stop.wait(interval):
            line = describe_active_stages(tracker)
            if line and line != last:
                log.info("spark: %s", line)
                last = line

    thread = threading.Thread(target=poll, name="spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
