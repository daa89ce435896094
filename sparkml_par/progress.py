"""Spark job progress on the driver while a stage runs: which Spark stages are active, how far along.

Spark's console bar is turned off (it overwrites log lines); this logs one line whenever the picture
changes, at most every `interval` seconds, each stage named as its job is ("prepare: profile").
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Iterator

from sparkml_par.spark_runtime.spark_jobs import open_groups

log = logging.getLogger("sparkml_par.spark")


def describe_active_stages(tracker, groups: dict[str, str]) -> str:
    """One part per active Spark stage, named by the description of its job's group (see spark_jobs).

    The active stages are read first: a stage that is active already belongs to a job the tracker knows
    (Spark posts a job's start before its stages'), so a job that starts between the two reads is named."""
    active = sorted(tracker.getActiveStageIds())
    names = {}
    for group, description in groups.items():
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            names.update(dict.fromkeys(job.stageIds if job is not None else (), description))
    parts = []
    for stage_id in active:
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            name = names.get(stage_id) or f"stage {stage_id} ({info.name.split(' at ')[0]})"
            parts.append(f"{name}: {info.numCompletedTasks}/{info.numTasks} tasks, {info.numActiveTasks} running")
    return "; ".join(parts)


@contextlib.contextmanager
def spark_progress(spark, interval: float = 10.0) -> Iterator[None]:
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()

    def poll() -> None:
        last = ""
        while not stop.wait(interval):
            line = describe_active_stages(tracker, open_groups())
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
