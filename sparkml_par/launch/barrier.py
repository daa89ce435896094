"""Ranks as the tasks of one barrier-mode Spark stage.

Each task derives the rank plan from the stage's task addresses (no message needed) and rank 0
starts the rendezvous on its own address; the driver's channel relays that address to the others.

Spark aborts a failed barrier stage whose tasks return results to the driver ("Could not recover
from a failed barrier ResultStage"), but retries a failed barrier stage that feeds a shuffle, up to
spark.stage.maxConsecutiveAttempts times, all tasks together. So the rank results go through a
one-partition shuffle: a rank process that dies makes Spark rerun the whole stage.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from sparkml_par.launch.horovod_backend import resolve_ip
from sparkml_par.launch.rank import RankSpec, run_rank
from sparkml_par.launch.rank_plan import build_rank_plan


def barrier_task(spec: RankSpec):
    """The function every barrier task runs; it yields (rank, result)."""

    def task(_rows):
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        ips = [resolve_ip(info.address.rsplit(":", 1)[0]) for info in ctx.getTaskInfos()]
        plan = build_rank_plan(ips)
        me = ctx.partitionId()
        resources = ctx.resources()
        gpus = tuple(resources["gpu"].addresses) if spec.use_gpu and "gpu" in resources else ()
        yield plan[me].rank, run_rank(spec, plan, me, ips[me], gpus, ctx.taskAttemptId())

    return task


class BarrierJob:
    """A barrier stage collected in a background thread, cancellable through its job group."""

    def __init__(self, sc, spec: RankSpec, num_proc: int, description: str):
        self._sc = sc
        self._group = f"sparkml_par-{uuid.uuid4().hex[:12]}"
        self._results: list[tuple[int, Any]] | None = None
        self._error: BaseException | None = None
        rdd = sc.parallelize(range(num_proc), num_proc).barrier().mapPartitions(barrier_task(spec)).repartition(1)

        def collect() -> None:
            # Job groups are per thread in PySpark: set it in the thread that submits the job.
            sc.setJobGroup(self._group, description, interruptOnCancel=True)
            try:
                self._results = rdd.collect()
            except BaseException as exc:  # handed to the supervising thread
                self._error = exc

        self._thread = threading.Thread(target=collect, name=self._group, daemon=True)
        self._thread.start()

    def wait(self, seconds: float) -> bool:
        self._thread.join(seconds)
        return not self._thread.is_alive()

    def cancel(self) -> None:
        self._sc.cancelJobGroup(self._group)

    def result(self) -> list[Any]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return [value for _, value in sorted(self._results, key=lambda pair: pair[0])]
