"""The launcher: how a function runs on N Horovod ranks, kept apart from the function's own arguments.

    launcher = Launcher(num_proc=2, timeout=600)
    results = launcher.run(fn, *args, **kwargs)   # [rank 0's return value, rank 1's, ...]

Every option lives on the Launcher (as TorchDistributor and Lightning Fabric keep theirs), so `run`
hands `fn` its arguments untouched: a function that takes `timeout=` or `env=` receives them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Callable, Literal, Mapping, Optional

from sparkml_par.errors import SparkmlParError
from sparkml_par.launch.barrier import barrier_job
from sparkml_par.launch.channel import DriverChannel
from sparkml_par.launch.local import LOOPBACK, LocalJob
from sparkml_par.launch.rank import RankSpec
from sparkml_par.launch.rank_plan import RankSlot
from sparkml_par.launch.slots import check_barrier_launch, concurrent_task_slots
from sparkml_par.launch.supervisor import Limits, supervise
from sparkml_par.spark_runtime.spark_jobs import current_description

log = logging.getLogger("sparkml_par.launch")


@dataclasses.dataclass(frozen=True)
class Launcher:
    """Where and how ranks run; checked when built, so a bad option fails before anything starts.

    num_proc=0 means every task slot of the cluster (barrier) or every CPU core (local). `spark` is the
    session to launch on (default: the active one). `env` is set in every rank before Horovod starts.
    `setup(slot)` runs in every rank after its environment is set and before it joins the Horovod
    rendezvous (per-rank set-up: environment variables, thread pinning, a warm cache; `slot.rank`,
    `slot.local_rank`, `slot.host`). `on_progress(rank, record)` receives the records ranks report; by
    default rank 0's are logged. With progress_timeout > 0, a rank that sends nothing (no log line,
    progress record or `current_rank().heartbeat()`) for that many seconds fails the launch.
    """

    num_proc: int = 0
    mode: Literal["barrier", "local"] = "barrier"
    use_gpu: bool = False
    timeout: float = 3600.0
    rendezvous_timeout: float = 120.0
    progress_timeout: float = 0.0
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    spark: Any = None
    on_progress: Optional[Callable[[int, dict], None]] = None
    setup: Optional[Callable[[RankSlot], None]] = None

    def __post_init__(self) -> None:
        if self.mode not in ("barrier", "local"):
            raise SparkmlParError(f"launch mode {self.mode!r} is not known; use 'barrier' or 'local'")
        if self.num_proc < 0:
            raise SparkmlParError(f"num_proc={self.num_proc} must be positive (0 means all slots)")

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """Runs fn(*args, **kwargs) on the ranks and returns their results in rank order."""
        env = {str(k): str(v) for k, v in self.env.items()}
        progress = self.on_progress or _log_rank0_progress
        if self.mode == "local":
            num_proc = self.num_proc or (os.cpu_count() or 1)
            channel = DriverChannel(LOOPBACK)
            try:
                job = LocalJob(self._spec(fn, args, kwargs, env, channel), num_proc)
                return supervise(job, channel, self._limits(f"local launch of {num_proc} ranks", num_proc), progress)
            finally:
                _close(channel, progress)

        sc = _spark_context(self.spark)
        slots = check_barrier_launch(sc, self.num_proc, use_gpu=self.use_gpu)
        num_proc = self.num_proc or slots
        attempts = int(sc.getConf().get("spark.stage.maxConsecutiveAttempts", "4"))
        channel = DriverChannel(sc.getConf().get("spark.driver.host"), attempts, lambda: concurrent_task_slots(sc))
        try:
            what = f"barrier stage of {num_proc} ranks"
            caller = current_description(sc) or f"sparkml_par {getattr(fn, '__name__', 'fn')}"
            job = barrier_job(
                sc, self._spec(fn, args, kwargs, env, channel), num_proc, f"{caller}: {what}"
            )  # "train: barrier stage of 2 ranks"
            return supervise(
                job,
                channel,
                self._limits(what, num_proc, attempts),
                progress,
                capacity=lambda: concurrent_task_slots(sc),
            )
        finally:
            _close(channel, progress)

    def _limits(self, what: str, num_proc: int, attempts: int = 1) -> Limits:
        return Limits(what, num_proc, self.timeout, self.rendezvous_timeout, self.progress_timeout, attempts)

    def _spec(self, fn, args, kwargs, env: dict[str, str], channel: DriverChannel) -> RankSpec:
        return RankSpec(
            fn=fn,
            args=tuple(args),
            kwargs=dict(kwargs),
            env=env,
            channel_address=channel.address,
            token=channel.token,
            timeout=self.timeout,
            use_gpu=self.use_gpu,
            setup=self.setup,
        )


def _close(channel: DriverChannel, progress: Callable[[int, dict], None]) -> None:
    """Closes the channel once every rank handler has finished, then hands on the progress records that
    arrived after the supervisor's last look (a rank's last epoch can land as its task returns)."""
    channel.close()
    for rank, record in channel.take_progress():
        progress(rank, record)


def _spark_context(spark):
    from pyspark.sql import SparkSession

    session = spark or SparkSession.getActiveSession()
    if session is None:
        raise SparkmlParError(
            "no active SparkSession for a barrier launch; build one with "
            "sparkml_par.spark_runtime.session.get_or_create_session(config.spark), or use mode='local'"
        )
    return session.sparkContext


def _log_rank0_progress(rank: int, record: dict) -> None:
    if rank == 0:
        log.info("progress %s", " ".join(f"{k}={v}" for k, v in record.items()))
