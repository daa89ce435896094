"""Driver side of training: check the dataset against the request, launch the ranks, report.

Everything that can be refused is refused here, before a barrier stage holds the cluster: a
missing dataset, more ranks than the train split has row groups, a batch smaller than the ranks.

A launch that stops at a checkpoint is launched again from it: on fewer ranks when a host was lost and
the cluster still holds train.min_proc of them, on all of them again when its slots are back, and on as
many as before after a SIGTERM (train/preemption.py). The ranks read the same streams of the train split
on any rank count (train/loop.py), so the run trains the same batches as without the interruptions.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable

from sparkml_par import launch
from sparkml_par.config import Config
from sparkml_par.contract import (
    MANIFEST_CLASSES,
    MANIFEST_FEATURE_PIPELINE,
    MANIFEST_FEATURE_SHAPE,
    MANIFEST_FINGERPRINT,
    MANIFEST_LABEL,
    MANIFEST_LABEL_SCALE,
    MANIFEST_NUM_CLASSES,
    MANIFEST_RAW_COLUMNS,
    MANIFEST_RAW_TYPES,
    MANIFEST_SPLITS,
    MANIFEST_TASK,
    MODEL_DIR,
    TRAIN_METRICS,
)
from sparkml_par.errors import SparkmlParError
from sparkml_par.io.hadoop import qualify_url
from sparkml_par.io.store import Store
from sparkml_par.launch.slots import check_barrier_launch, concurrent_task_slots
from sparkml_par.models.registry import build_from_spec, model_spec
from sparkml_par.spark_runtime.session import require_classic_session
from sparkml_par.spark_runtime.spark_jobs import spark_job
from sparkml_par.stage import Run, Stage, fingerprint
from sparkml_par.train.artifact import artifact_complete
from sparkml_par.train.checkpoint import checkpoint_fingerprint, newest_checkpoint
from sparkml_par.train.loop import TrainJob, train_rank
from sparkml_par.train.metrics import epoch_record_metrics

log = logging.getLogger("sparkml_par.train")


@dataclass
class TrainResult:
    history: list[dict[str, Any]]
    test: dict[str, float]
    artifact: str
    epochs_run: int
    stopped_early: bool
    seconds: float
    interruptions: list[dict[str, Any]]  # resizes and preemptions (train/loop.py's events), in order


def build_train_job(manifest: dict[str, Any], dataset_url: str, cfg: Config, num_proc: int) -> TrainJob:
    splits = manifest[MANIFEST_SPLITS]
    train_groups = splits["train"]["row_groups"]
    if num_proc > train_groups:
        raise SparkmlParError(
            f"train.num_proc={num_proc} but the train split of {dataset_url} has only {train_groups} row groups, "
            f"so some ranks would read nothing; lower train.num_proc, or re-shard the dataset with "
            f"data.max_shards={num_proc} (a multiple of the rank count) and run sparkml-par prepare again"
        )
    if cfg.train.batch_size < num_proc:
        raise SparkmlParError(
            f"train.batch_size={cfg.train.batch_size} is smaller than train.num_proc={num_proc}; "
            f"every rank needs at least one row per batch"
        )
    task = manifest[MANIFEST_TASK]
    _check_monitor(cfg, task, validation=splits.get("validation", {}).get("rows", 0) >= num_proc)
    outputs = manifest[MANIFEST_NUM_CLASSES] if task == "classification" else 1
    scale = manifest.get(MANIFEST_LABEL_SCALE)
    spec = model_spec(
        cfg.train.model,
        cfg.train.model_args,
        tuple(manifest[MANIFEST_FEATURE_SHAPE]),
        outputs,
        target_scale=(scale["mean"], scale["std"]) if task == "regression" and scale else None,
    )
    build_from_spec(spec)  # a wrong model name or argument fails here, on the driver, not in every rank
    root = dataset_url.rstrip("/")
    return TrainJob(
        train=cfg.train,
        splits={name: f"{root}/{split['path']}" for name, split in splits.items()},
        label=manifest[MANIFEST_LABEL],
        split_rows={name: split["rows"] for name, split in splits.items()},
        task=task,
        model_spec=spec,
        fingerprint=checkpoint_fingerprint(spec, cfg.train, manifest[MANIFEST_FINGERPRINT]),
        output=Store(cfg.train.output).url,
        description={
            "spec": spec,
            "task": task,
            "num_classes": manifest[MANIFEST_NUM_CLASSES],
            "classes": manifest.get(MANIFEST_CLASSES),
            "feature_shape": manifest[MANIFEST_FEATURE_SHAPE],
            "dataset": root,
            "dataset_fingerprint": manifest[MANIFEST_FINGERPRINT],
            "feature_pipeline": manifest.get(MANIFEST_FEATURE_PIPELINE),
            "raw_feature_columns": manifest.get(MANIFEST_RAW_COLUMNS, []),
            "raw_feature_types": manifest.get(MANIFEST_RAW_TYPES, {}),
            "label_column": manifest[MANIFEST_LABEL],
        },
        config_yaml=cfg.to_yaml(),
        use_gpu=cfg.spark.use_gpu,
        shards=num_proc,
    )


def _check_monitor(cfg: Config, task: str, validation: bool) -> None:
    """The metric early stopping or the plateau schedule watches must be one the ranks will report."""
    stopping = cfg.train.early_stopping
    if stopping.patience <= 0 and cfg.train.scheduler != "plateau":
        return
    known = epoch_record_metrics(task, validation)
    if stopping.monitor not in known:
        why = (
            ""
            if validation or not stopping.monitor.startswith("val_")
            else (" (the dataset's validation split has fewer rows than ranks, so no val_* metric is reported)")
        )
        raise SparkmlParError(
            f"train.early_stopping.monitor: {stopping.monitor!r} is not a metric of this run"
            f"{why}; choose one of {', '.join(known)}"
        )


def train(spark, cfg: Config, on_epoch: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
    """Trains cfg.train.model on the dataset at cfg.data.output with cfg.train.num_proc Horovod ranks;
    on_epoch, when given, gets rank 0's record of every epoch as it ends (the pipeline's tracking)."""
    from data_prep.manifest import read_manifest

    require_classic_session(spark, "train")
    Store(cfg.train.output).check_writable("train.output")
    dataset_url = qualify_url(cfg.data.output)
    manifest = read_manifest(spark, dataset_url)
    if manifest is None:
        raise SparkmlParError(
            f"no dataset at data.output={cfg.data.output!r} (no _manifest.json); "
            f"run `sparkml-par prepare` with the same config first"
        )
    num_proc = cfg.train.num_proc
    if num_proc == 0 and cfg.train.launcher == "barrier":
        num_proc = check_barrier_launch(spark.sparkContext, 0, use_gpu=cfg.spark.use_gpu)
    job = build_train_job(manifest, dataset_url, cfg, num_proc or 1)
    if cfg.train.pipeline_stages > 1 and not cfg.spark.use_gpu:
        log.warning(
            "train.pipeline_stages=%d on CPU ranks: the stages share each rank's one device, so the split "
            "model runs no faster (it only tests the split); stages run on separate devices on GPU "
            "executors with that many GPUs per rank",
            cfg.train.pipeline_stages,
        )
    log.info(
        "training %s on %d %s ranks: %d train rows, global batch %d, %d epochs",
        cfg.train.model,
        num_proc,
        cfg.train.launcher,
        job.split_rows["train"],
        cfg.train.batch_size,
        cfg.train.epochs,
    )
    started = time.monotonic()
    progress = _Progress(cfg.train.epochs, on_epoch)
    min_proc = cfg.train.min_proc or num_proc
    ranks = num_proc
    while True:
        progress.failed_at_step = None
        try:
            with spark_job(spark.sparkContext, "train"):  # the stage is "train: barrier stage of N ranks"
                launcher = launch.Launcher(
                    num_proc=ranks,
                    mode=cfg.train.launcher,
                    use_gpu=cfg.spark.use_gpu,
                    timeout=cfg.train.timeout,
                    progress_timeout=cfg.train.step_timeout,
                    spark=spark,
                    on_progress=progress,
                )
                results = launcher.run(train_rank, job)
        except launch.LaunchError as exc:
            if exc.slots is None or exc.slots < min_proc or ranks <= min_proc:
                raise _training_failed(exc, cfg, job, progress, min_proc) from None
            log.warning(
                "rank %s on host %s was lost and the cluster now has %d task slot(s): training goes on with %d "
                "ranks instead of %d (train.min_proc=%d) from the newest checkpoint, %s",
                exc.rank,
                exc.host,
                exc.slots,
                exc.slots,
                ranks,
                min_proc,
                newest_checkpoint(f"{job.output}/checkpoints") or "none: from the start",
            )
            stop = {"reason": "lost", "ranks": ranks, "step": progress.failed_at_step, "at": exc.lost_at}
            job, ranks = replace(job, resumed_after=stop), exc.slots
            continue
        stopped = results[0].get("stopped")
        if stopped is None:
            break
        wanted = (
            stopped["wanted"] if stopped["reason"] == "grow" else _ranks_now(spark, cfg, job.shards, ranks, min_proc)
        )
        log.warning(
            "the ranks stopped after step %d (%s) at a checkpoint: training goes on with %d ranks (%d before)",
            stopped["step"],
            "slots for more ranks are back" if stopped["reason"] == "grow" else "SIGTERM",
            wanted,
            ranks,
        )
        job, ranks = replace(job, resumed_after=stopped), wanted
    chief = results[0]
    return TrainResult(
        history=chief["history"],
        test=chief["test"],
        artifact=chief["artifact"],
        epochs_run=chief["epochs_run"],
        stopped_early=chief["stopped_early"],
        seconds=time.monotonic() - started,
        interruptions=chief["interruptions"],
    )


def _ranks_now(spark, cfg: Config, shards: int, ranks: int, min_proc: int) -> int:
    """After a preemption: the ranks the cluster holds now (the preempted executor may be gone), up to one per
    stream of the train split and at least min_proc (the launch then waits for slots as any launch does)."""
    if cfg.train.launcher != "barrier" or min_proc >= shards:
        return ranks
    return max(min_proc, min(shards, concurrent_task_slots(spark.sparkContext)))


def _training_failed(
    exc: launch.LaunchError, cfg: Config, job: TrainJob, progress: "_Progress", min_proc: int
) -> launch.LaunchError:
    newest = newest_checkpoint(f"{job.output}/checkpoints")
    where = (
        f"the newest checkpoint is {newest}: `sparkml-par train` with the same config resumes from it"
        if newest
        else f"no checkpoint was written under {job.output}/checkpoints"
    )
    fewer = (
        f" (train.min_proc={min_proc}: training goes on only with at least that many ranks)"
        if exc.slots is not None and min_proc < cfg.train.num_proc
        else ""
    )
    epoch = (progress.epochs_done[-1] if progress.epochs_done else 0) + 1
    return launch.LaunchError(
        f"training failed in epoch {epoch} of {cfg.train.epochs}{fewer}; {where}.\n{exc}",
        rank=exc.rank,
        host=exc.host,
        remote_traceback=exc.remote_traceback,
    )


class _Progress:
    """The ranks' progress records: rank 0's epochs as log lines with an ETA (and to on_epoch), the resizes
    and preemptions it reports, and the step the ranks were at when a launch failed."""

    def __init__(self, epochs: int, on_epoch: Callable[[dict[str, Any]], None] | None):
        self.epochs, self.on_epoch = epochs, on_epoch
        self.epochs_done: list[int] = []
        self.times: list[float] = []
        self.failed_at_step: int | None = None

    def __call__(self, rank: int, record: dict) -> None:
        if "failed_at_step" in record:
            self.failed_at_step = max(self.failed_at_step or 0, record["failed_at_step"])
        elif rank == 0 and "interruption" in record:
            event = record["interruption"]
            repeated = event["steps_repeated"]
            log.info(
                "training again on %d ranks (%s before, %s) in epoch %d, %.1f s after the stop; %s steps "
                "repeated; resumed from %s",
                event["ranks_after"],
                event["ranks_before"],
                event["reason"],
                event["epoch"],
                event["seconds_to_training"],
                "unknown" if repeated is None else repeated,
                event["checkpoint"],
            )
        elif rank == 0 and "epoch" in record:
            self._epoch(record)

    def _epoch(self, record: dict) -> None:
        self.epochs_done.append(record["epoch"])
        self.times.append(record["epoch_time"])
        metrics = " ".join(
            f"{k}={v:.4g}"
            for k, v in record.items()
            if k.startswith(("train_", "val_")) and isinstance(v, (int, float))
        )
        eta = sum(self.times) / len(self.times) * (self.epochs - record["epoch"])
        log.info(
            "epoch %d/%d %s lr=%.3g %.0f samples/s %.1f s, ETA %.0f s",
            record["epoch"],
            self.epochs,
            metrics,
            record["lr"],
            record["samples_per_sec"],
            record["epoch_time"],
            eta,
        )
        if self.on_epoch is not None:
            self.on_epoch(record)


def summary(result: TrainResult) -> str:
    lines = [
        f"model artifact {result.artifact}",
        f"  epochs run    {result.epochs_run}" + (" (stopped early)" if result.stopped_early else ""),
    ]
    if result.history:
        last = result.history[-1]
        lines.append(
            "  last epoch    " + " ".join(f"{k}={v:.4f}" for k, v in last.items() if k.startswith(("train_", "val_")))
        )
    if result.test:
        lines.append("  test          " + " ".join(f"{k}={v:.4f}" for k, v in result.test.items() if k != "samples"))
    for event in result.interruptions:
        repeated = event["steps_repeated"]
        lines.append(
            f"  {event['reason']:<13} epoch {event['epoch']}: {event['ranks_before']} -> {event['ranks_after']} ranks, "
            f"{'unknown' if repeated is None else repeated} steps repeated, training again "
            f"{event['seconds_to_training']:.1f} s after the stop"
        )
    lines.append(f"  {result.seconds:.1f} s")
    return "\n".join(lines)


def run(cfg: Config) -> int:
    """Entry point of `sparkml-par train`."""
    from sparkml_par.spark_runtime.session import TORCH_WORKERS, run_stage

    return run_stage(cfg, lambda spark: train(spark, cfg), summary, worker_imports=TORCH_WORKERS)


def _stage_work(run: Run, resume: bool):
    cfg = run.train_cfg
    # A changed train config starts over: its checkpoints would continue a different run.
    cfg = cfg if resume else replace(cfg, train=replace(cfg.train, resume="never"))
    result = train(run.spark, cfg, on_epoch=run.tracker.epoch_logger(run.stage_run))
    run.tracker.log_test_metrics(run.stage_run, result.test)
    run.tracker.log_file(run.stage_run, f"{cfg.train.output.rstrip('/')}/{TRAIN_METRICS}")
    run.tracker.log_model(run.stage_run, result.artifact)
    summary = {"test": result.test, "epochs_run": result.epochs_run}
    if result.interruptions:  # the stage's summary, also its MLflow metrics
        summary["interruptions"] = interruption_counts(result.interruptions)
    return result.artifact, summary


def interruption_counts(interruptions: list[dict[str, Any]]) -> dict[str, int | float]:
    """The run's resizes and preemptions in numbers: how many, the fewest ranks, the steps and seconds lost."""
    return {
        "resizes": sum(e["ranks_after"] != e["ranks_before"] for e in interruptions),
        "preemptions": sum(e["reason"] == "preempted" for e in interruptions),
        "fewest_ranks": min(e["ranks_after"] for e in interruptions),
        "steps_repeated": sum(e["steps_repeated"] or 0 for e in interruptions),
        "seconds_to_training_again": round(sum(e["seconds_to_training"] for e in interruptions), 3),
    }


STAGE = Stage(
    "train",
    lambda run: fingerprint(asdict(run.train_cfg.train), run.dataset_fingerprint()),
    lambda run: artifact_complete(f"{run.train_cfg.train.output.rstrip('/')}/{MODEL_DIR}"),
    _stage_work,
)
