"""One SparkSession builder for every entry point.

On the embedded default (`local[N]`, `local-cluster[...]`) everything binds to loopback, so nothing
listens on a public interface. An already active session (a Databricks notebook, a spark-submit job
that built its own) is reused as is and never stopped by us.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any, Callable, Iterator

from sparkml_par.config import SparkConfig
from sparkml_par.errors import ConfigError

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


def is_local_master(master: str) -> bool:
    return master == "local" or master.startswith(("local[", "local-cluster["))


def session_settings(cfg: SparkConfig) -> dict[str, str]:
    """Every setting the builder applies: ours first, then the user's spark.* settings win."""
    # The project logs stage, epoch and throughput itself; Spark's bar would break those lines on any master.
    settings = {"spark.app.name": cfg.app_name, "spark.master": cfg.master, "spark.ui.showConsoleProgress": "false"}
    if is_local_master(cfg.master):
        settings.update({
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "8",
            # Executors of the embedded default run the driver's interpreter (the project's venv).
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
        })
    if cfg.use_gpu:
        settings.update(_gpu_settings(cfg))
    settings.update(cfg.conf)
    return settings


def _gpu_settings(cfg: SparkConfig) -> dict[str, str]:
    """One GPU per task. In local-cluster mode the workers discover the GPUs and lend them to executors."""
    if cfg.master.startswith("local") and not cfg.master.startswith("local-cluster["):
        raise ConfigError(
            f"spark.use_gpu: Spark's {cfg.master} master runs tasks in the driver and cannot assign GPUs to "
            f"them; use spark.master=local-cluster[1,<GPUs>,<MB>] on one machine, or a cluster with GPU executors"
        )
    settings = {
        "spark.executor.resource.gpu.amount": str(cfg.gpus_per_executor),
        "spark.task.resource.gpu.amount": "1",
    }
    if cfg.gpu_discovery_script:
        settings["spark.executor.resource.gpu.discoveryScript"] = cfg.gpu_discovery_script
    if cfg.master.startswith("local-cluster["):
        settings["spark.worker.resource.gpu.amount"] = str(cfg.gpus_per_executor)
        if cfg.gpu_discovery_script:
            settings["spark.worker.resource.gpu.discoveryScript"] = cfg.gpu_discovery_script
    return settings


def get_or_create_session(cfg: SparkConfig):
    """Returns (session, created): an active session is reused, otherwise one is built from cfg."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        master = active.sparkContext.master
        # Nothing silently dropped: name every requested setting the reused session does not have.
        ignored = [f"spark.master={cfg.master}"] if master != cfg.master else []
        ignored += [f"{key}={value}" for key, value in cfg.conf.items() if active.conf.get(key, None) != value]
        if ignored:
            log.info("reusing the active Spark session (master %s); not applied: %s", master, ", ".join(ignored))
        return active, False
    if is_local_master(cfg.master):
        # Read by the driver JVM and by local-cluster executors at start-up, before any setting applies.
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in session_settings(cfg).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session, True


@contextlib.contextmanager
def spark_session(cfg: SparkConfig) -> Iterator:
    """A session for the duration of a job; stopped afterwards only if this call created it."""
    session, created = get_or_create_session(cfg)
    try:
        yield session
    finally:
        if created:
            session.stop()


def run_stage(cfg, work: Callable[[Any], Any], summarize: Callable[[Any], str]) -> int:
    """A CLI stage: its work in a session for cfg.spark (an active one is reused), then its summary."""
    with spark_session(cfg.spark) as spark:
        result = work(spark)
    print(summarize(result))
    return 0
