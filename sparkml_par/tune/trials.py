"""One trial as one Spark task: a 1-process Horovod, `train_rank` on the petastorm dataset, a score.

The driver builds the trial's TrainJob (its config with the trial's params, its own directory under
tune.output/trials/<number>), submits a job of one task in its own job group, and while it runs reads
the trial's metrics.jsonl, which the trainer rewrites after every epoch: each new epoch's value of
the tuned metric goes to the search loop, which may answer "stop" (pruned, diverged); the driver then
cancels the job group and Spark kills the task. The task catches its own errors and returns them, so
a failing trial is one failed record (Spark does not retry it) and the search goes on.
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from dataclasses import dataclass
from typing import Any

from sparkml_par.config import Config
from sparkml_par.contract import TRAIN_METRICS
from sparkml_par.errors import ConfigError
from sparkml_par.io.store import Store
from sparkml_par.spark_runtime.spark_jobs import BackgroundJob
from sparkml_par.train.loop import TrainJob
from sparkml_par.tune.search_loop import TrialControl
from sparkml_par.tune.space import apply_params
from sparkml_par.tune.study import TrialOutcome, TrialRequest

_POLL_SECONDS = 0.5
_METRIC_PREFIXES = ("train_", "val_", "test_")


@dataclass(frozen=True)
class TrialTask:
    """Plain values the Spark task needs (the closure captures it: no session, no open handles)."""

    number: int
    job: TrainJob


def run_trial_task(task: TrialTask) -> dict[str, Any]:
    """Runs in the Spark task: Horovod of size 1 from a clean environment, then the trainer."""
    import horovod.torch as hvd

    from sparkml_par.train.loop import train_rank

    started = time.time()
    saved_env = dict(os.environ)
    # A Python worker Spark reuses may carry a barrier stage's HOROVOD_* settings: without any,
    # hvd.init() starts a Horovod of one process (rank 0 of size 1) with no rendezvous.
    for name in [n for n in os.environ if n.startswith("HOROVOD_")]:
        del os.environ[name]
    initialized = False
    try:
        hvd.init()
        initialized = True
        if hvd.size() != 1:
            raise RuntimeError(f"the trial's Horovod has {hvd.size()} processes, expected 1")
        result = train_rank(task.job)
        if "stopped" in result:  # SIGTERM reached the trial: it ends as a failed trial that says so
            raise RuntimeError(f"the trial was stopped by SIGTERM after step {result['stopped']['step']}")
        outcome = {
            "status": "complete",
            "history": result["history"],
            "test": result["test"],
            "artifact": result["artifact"],
            "epochs_run": result["epochs_run"],
        }
    except Exception as exc:  # noqa: BLE001 - returned to the driver as this trial's error
        outcome = {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    finally:
        if initialized:
            hvd.shutdown()
        os.environ.clear()
        os.environ.update(saved_env)
    return {**outcome, "started": started, "finished": time.time(), "host": socket.gethostname(), "pid": os.getpid()}


def check_metric(metric: str, task: str) -> None:
    """The tuned metric must be one the trainer reports for this task."""
    names = ("loss", "accuracy") if task == "classification" else ("loss", "mse", "mae")
    known = [f"{prefix}{name}" for prefix in _METRIC_PREFIXES for name in names]
    if metric not in known:
        raise ConfigError(
            f"tune.metric={metric!r} is not reported for a {task} dataset; choose one of {', '.join(known)}"
        )


def score_of(result: dict[str, Any], metric: str) -> float | None:
    """The metric of the last epoch (the weights the trial's artifact holds), or of the test split."""
    if metric.startswith("test_"):
        value = result["test"].get(metric.removeprefix("test_"))
    else:
        value = result["history"][-1].get(metric) if result["history"] else None
    return None if value is None else float(value)


class SparkTrials:
    """The search loop's `evaluate` for Spark: one trial, one job of one task, a thread per trial."""

    def __init__(self, spark, cfg: Config, manifest: dict[str, Any], dataset_url: str, trials_url: str):
        self._sc = spark.sparkContext
        self._cfg = cfg
        self._manifest = manifest
        self._dataset_url = dataset_url
        self._trials_dir = trials_url

    def trial_config(self, request: TrialRequest) -> Config:
        output = f"{self._trials_dir}/{request.number:04d}"
        return apply_params(self._cfg, request.params, {"train.output": output, "train.num_proc": 1})

    def __call__(self, request: TrialRequest, control: TrialControl) -> TrialOutcome:
        from sparkml_par.train.job import build_train_job

        cfg = self.trial_config(request)
        # A trial number is new to the study: anything in its directory is from a discarded study.
        Store(cfg.train.output).delete_all()
        job = build_train_job(self._manifest, self._dataset_url, cfg, 1)
        return self._run(TrialTask(request.number, job), control, cfg.train.timeout, self._cfg.tune.metric)

    def _run(self, task: TrialTask, control: TrialControl, timeout: float, metric: str) -> TrialOutcome:
        rdd = self._sc.parallelize([task], 1).map(run_trial_task)
        submitted = time.time()
        job = BackgroundJob(self._sc, lambda: rdd.collect()[0], f"tune: trial {task.number}")
        metrics = Store(task.job.output)
        epochs_seen = 0
        while not job.wait(_POLL_SECONDS):
            epochs_seen = _report_new_epochs(metrics, metric, epochs_seen, control)
            if time.time() - submitted > timeout and not control.stop_requested():
                control.request_stop("timeout", f"did not finish within train.timeout={timeout:g} s")
            if control.stop_requested():
                job.cancel()
                job.wait(None)
        try:
            result = job.result()
        except Exception as exc:  # noqa: BLE001 - a task that died (killed, out of memory, cancelled)
            return TrialOutcome(
                "failed",
                error=_spark_error_text(exc),
                started=submitted,
                finished=time.time(),
                details={"epochs": epochs_seen},
            )
        _report_new_epochs(metrics, metric, epochs_seen, control)
        return _outcome(result, metric)


def _report_new_epochs(output: Store, metric: str, seen: int, control: TrialControl) -> int:
    """Sends the tuned metric of epochs not reported yet; returns the number of epochs reported."""
    if metric.startswith("test_"):
        return seen
    try:
        records = [json.loads(line) for line in output.read_text(TRAIN_METRICS).splitlines() if line.strip()]
    except (OSError, ValueError):  # not written yet, or replaced while being read: the next poll sees it
        return seen
    for record in records[seen:]:
        value = record.get(metric)
        # The trainer writes a non-finite value as null.
        control.report(int(record["epoch"]), float("nan") if value is None else float(value))
    return max(seen, len(records))


def _outcome(result: dict[str, Any], metric: str) -> TrialOutcome:
    details = {"host": result["host"], "pid": result["pid"]}
    if result["status"] == "failed":
        details["traceback"] = result["traceback"]
        return TrialOutcome(
            "failed", error=result["error"], started=result["started"], finished=result["finished"], details=details
        )
    details.update(epochs=result["epochs_run"], artifact=result["artifact"])
    score = score_of(result, metric)
    if score is None:
        available = sorted(
            {k for record in result["history"] for k in record if k.startswith(_METRIC_PREFIXES)}
            | {f"test_{k}" for k in result["test"] if k != "samples"}
        )
        return TrialOutcome(
            "failed",
            error=f"the trial reported no {metric!r} (it reported {', '.join(available)}); "
            f"an empty validation split reports no val_* metrics",
            started=result["started"],
            finished=result["finished"],
            details=details,
        )
    return TrialOutcome(
        "complete", score=score, started=result["started"], finished=result["finished"], details=details
    )


def _spark_error_text(exc: BaseException) -> str:
    """The Python error inside a Spark failure, without the JVM stack around it."""
    lines = str(exc).splitlines()
    python = [line for line in lines if line and not line.startswith(("\tat ", "\t... "))]
    return "\n".join(python[-12:]) if python else type(exc).__name__
