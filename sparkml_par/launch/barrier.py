"""Ranks as the tasks of one barrier-mode Spark stage.

Each task derives the rank plan from the stage's task addresses (no message needed) and rank 0
starts the rendezvous on its own address; the driver's channel relays that address to the others.

Spark aborts a failed barrier stage whose tasks return results to the driver ("Could not recover
from a failed barrier ResultStage"), but retries a failed barrier stage that feeds a shuffle, up to
spark.stage.maxConsecutiveAttempts times, all tasks together. So the rank results go through a
one-partition shuffle: a rank process that dies makes Spark rerun the whole stage.
"""

from __future__ import annotations

import json

from sparkml_par.launch.horovod_backend import resolve_ip
from sparkml_par.launch.rank import RankSpec, run_rank
from sparkml_par.launch.rank_plan import build_rank_plan
from sparkml_par.spark_runtime.spark_jobs import BackgroundJob


def barrier_task(spec: RankSpec):
    """The function every barrier task runs; it yields (rank, result)."""

    def task(_rows):
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        ips = [resolve_ip(info.address.rsplit(":", 1)[0]) for info in ctx.getTaskInfos()]
        me = ctx.partitionId()
        resources = ctx.resources()
        gpus = tuple(resources["gpu"].addresses) if spec.use_gpu and "gpu" in resources else ()
        # Every task's GPUs, so that local ranks follow the GPU addresses on each host.
        task_gpus = [tuple(json.loads(m)) for m in ctx.allGather(json.dumps(gpus))] if spec.use_gpu else None
        plan = build_rank_plan(ips, task_gpus)
        yield plan[me].rank, run_rank(spec, plan, me, ips[me], gpus, ctx.taskAttemptId())

    return task


def barrier_job(sc, spec: RankSpec, num_proc: int, description: str) -> BackgroundJob:
    """The barrier stage of num_proc ranks, started in the background; its result is the ranks' values in rank order."""
    rdd = sc.parallelize(range(num_proc), num_proc).barrier().mapPartitions(barrier_task(spec)).repartition(1)
    return BackgroundJob(
        sc, lambda: [value for _, value in sorted(rdd.collect(), key=lambda pair: pair[0])], description
    )
