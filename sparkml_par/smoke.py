"""Smoke job: N Horovod ranks in one Spark barrier stage all-reduce a tensor; proves the stack works."""

from __future__ import annotations

import logging
import time

from sparkml_par import launch
from sparkml_par.config import Config
from sparkml_par.spark_runtime.session import spark_session

log = logging.getLogger(__name__)


def allreduce_rank_ids() -> list[float]:
    """Each rank contributes rank + 1; every rank must end with 1 + 2 + ... + size."""
    import horovod.torch as hvd
    import torch

    return hvd.allreduce(torch.full((4,), float(hvd.rank() + 1)), op=hvd.Sum).tolist()


def run(cfg: Config) -> int:
    with spark_session(cfg.spark) as spark:
        started = time.monotonic()
        launcher = launch.Launcher(
            num_proc=cfg.train.num_proc, mode=cfg.train.launcher, use_gpu=cfg.spark.use_gpu, spark=spark
        )
        results = launcher.run(allreduce_rank_ids)
        size = len(results)
        expected = size * (size + 1) / 2
        print(
            f"all-reduced sum over {size} Horovod ranks: {results[0]} (expected {expected:g} each), "
            f"{time.monotonic() - started:.1f} s"
        )
        if any(values != [expected] * 4 for values in results):
            log.error("ranks disagree: %s", results)
            return 1
    return 0
