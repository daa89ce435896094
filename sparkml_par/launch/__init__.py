"""Run a Python function on N Horovod ranks: the tasks of one barrier-mode Spark stage, or local processes.

    results = run(fn, *args, num_proc=2)   # [rank 0's return value, rank 1's, ...]

Inside `fn`, Horovod is initialized (`import horovod.torch as hvd; hvd.rank()`), and
`current_rank().report({...})` sends progress records to the driver while the stage runs.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Literal

from sparkml_par import faults
from sparkml_par.errors import SparkmlParError
from sparkml_par.launch.barrier import barrier_job
from sparkml_par.launch.channel import DriverChannel
from sparkml_par.launch.local import LOOPBACK, LocalJob
from sparkml_par.launch.rank import RankSpec, current_rank
from sparkml_par.launch.slots import check_barrier_launch, concurrent_task_slots
from sparkml_par.launch.supervisor import LaunchError, supervise
from sparkml_par.spark_jobs import current_description

__all__ = ["run", "current_rank", "LaunchError"]

log = logging.getLogger("sparkml_par.launch")


def run(fn: Callable[..., Any], *args: Any, num_proc: int = 0, use_gpu: bool = False,
        mode: Literal["barrier", "local"] = "barrier", timeout: float = 3600.0, rendezvous_timeout: float = 120.0,
        progress_timeout: float = 0.0, env: dict[str, str] | None = None, spark=None,
        on_progress: Callable[[int, dict], None] | None = None, **kwargs: Any) -> list[Any]:
    """Runs fn(*args, **kwargs) on num_proc Horovod ranks and returns their results in rank order.

    num_proc=0 means every task slot of the cluster (barrier) or every CPU core (local). `spark` is the
    session to launch on (default: the active one). `on_progress(rank, record)` receives the records
    ranks report; by default rank 0's are logged. With progress_timeout > 0, a rank that sends nothing
    (no log line, progress record or `current_rank().heartbeat()`) for that many seconds fails the launch.
    """
    if mode not in ("barrier", "local"):
        raise SparkmlParError(f"launch mode {mode!r} is not known; use 'barrier' or 'local'")
    if num_proc < 0:
        raise SparkmlParError(f"num_proc={num_proc} must be positive (0 means all slots)")
    env = {**faults.forwarded(), **{str(k): str(v) for k, v in (env or {}).items()}}
    progress = on_progress or _log_rank0_progress

    if mode == "local":
        num_proc = num_proc or (os.cpu_count() or 1)
        with DriverChannel(LOOPBACK, progress) as channel:
            spec = _spec(fn, args, kwargs, env, channel, timeout, use_gpu)
            job = LocalJob(spec, num_proc)
            return supervise(job, channel, num_proc, timeout, rendezvous_timeout, f"local launch of {num_proc} ranks",
                             progress_timeout)

    sc = _spark_context(spark)
    slots = check_barrier_launch(sc, num_proc)
    num_proc = num_proc or slots
    driver_host = sc.getConf().get("spark.driver.host")
    attempts = int(sc.getConf().get("spark.stage.maxConsecutiveAttempts", "4"))
    with DriverChannel(driver_host, progress, attempts) as channel:
        spec = _spec(fn, args, kwargs, env, channel, timeout, use_gpu)
        what = f"barrier stage of {num_proc} ranks"
        caller = current_description(sc) or f"sparkml_par {getattr(fn, '__name__', 'fn')}"
        job = barrier_job(sc, spec, num_proc, f"{caller}: {what}")  # "train: barrier stage of 2 ranks"
        return supervise(job, channel, num_proc, timeout, rendezvous_timeout, what, progress_timeout, attempts,
                         capacity=lambda: concurrent_task_slots(sc))


def _spec(fn, args, kwargs, env, channel: DriverChannel, timeout: float, use_gpu: bool) -> RankSpec:
    return RankSpec(fn=fn, args=tuple(args), kwargs=dict(kwargs), env=env, channel_address=channel.address,
                    token=channel.token, timeout=timeout, use_gpu=use_gpu)


def _spark_context(spark):
    from pyspark.sql import SparkSession

    session = spark or SparkSession.getActiveSession()
    if session is None:
        raise SparkmlParError("no active SparkSession for a barrier launch; build one with "
                              "sparkml_par.session.get_or_create_session(config.spark), or use mode='local'")
    return session.sparkContext


def _log_rank0_progress(rank: int, record: dict) -> None:
    if rank == 0:
        log.info("progress %s", " ".join(f"{k}={v}" for k, v in record.items()))
