"""The whole pipeline in one Spark application: prepare -> tune (when configured) -> train -> score -> report.

Each stage records a fingerprint: a hash of its config section and of its inputs' fingerprints. A
re-run skips a stage whose fingerprint matches and whose output is complete, so re-running after a
crash redoes only what is missing; `--from STAGE` (output.from_stage) forces a stage and all after it.
The run directory holds the effective config, `stages.json` (each stage's fingerprint, outputs and
time), the log and the report. The stages themselves are data (`sparkml_par.stage.Stage`), one
exported by each stage's module.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from data_prep.ingest import input_bytes
from sparkml_par.config import Config
from sparkml_par.contract import CONFIG_COPY, RUN_LOG
from sparkml_par.io import local_files
from sparkml_par.io.hadoop import check_writable_url, qualify_url
from sparkml_par.io.store import Store, WorkingCopy, local_path
from sparkml_par.progress import spark_progress
from sparkml_par.spark_runtime.session import SHORT_RUN_INPUT_BYTES, TORCH_WORKERS, spark_session
from sparkml_par.stage import Run, Stage, StageRecord
from sparkml_par.tracking import Tracker

log = logging.getLogger("sparkml_par.pipeline")


class RunState:
    """stages.json of a run directory, rewritten atomically when a stage starts and when it finishes.

    A stage that started but never finished (the run was killed) keeps its fingerprint, so the next
    run knows its partial output (e.g. training checkpoints) belongs to the same config; a run killed
    while writing the file leaves its hidden temporary copy, which the next run removes.
    """

    def __init__(self, run_dir: Path):
        self.path = run_dir / "stages.json"
        local_files.remove_leftovers(self.path)
        self.stages: dict[str, dict[str, Any]] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def matches(self, stage: str, fingerprint: str) -> bool:
        return self.stages.get(stage, {}).get("fingerprint") == fingerprint

    def finished(self, stage: str) -> bool:
        return self.stages.get(stage, {}).get("finished", False)

    def started(self, stage: str, fingerprint: str) -> None:
        self.stages[stage] = {"fingerprint": fingerprint, "finished": False}
        self._write()

    def record(self, stage: str, record: StageRecord) -> None:
        self.stages[stage] = {**dataclasses.asdict(record), "finished": True}
        self._write()

    def _write(self) -> None:
        local_files.write_text(self.path, json.dumps(self.stages, indent=2, default=str))


def run_pipeline(
    spark, cfg: Config, run_dir: WorkingCopy | None = None, tracker: Tracker | None = None
) -> dict[str, StageRecord]:
    """Runs every stage that is due; returns the records of all stages of this run.

    run_dir is the open run directory (`open_run_directory`), or None to open (and close) it here;
    tracker the run's MLflow side, or None to start one here from cfg.tracking.
    """
    own = run_dir is None
    run_dir = open_run_directory(cfg) if own else run_dir
    try:
        check_writable_url(spark, qualify_url(cfg.score.output), "score.output")
        local_files.write_text(run_dir.dir / CONFIG_COPY, cfg.to_yaml())
        state = RunState(run_dir.dir)
        every = pipeline_stages()
        names = [stage.name for stage in every]
        forced = set(names[names.index(cfg.output.from_stage) :]) if cfg.output.from_stage else set()
        stages = [stage for stage in every if stage.name != "tune" or cfg.tune.space]
        tracker = tracker or Tracker(cfg.tracking, run_dir.dir)
        tracker.start(cfg)
        run = Run(spark, cfg, run_dir, tracker)
        started = time.monotonic()
        failed = True
        try:
            for index, stage in enumerate(stages, 1):
                run.records[stage.name] = _run_stage(
                    stage, run, state, stage.name in forced, f"[{index}/{len(stages)}] {stage.name}"
                )
                run_dir.push()
            failed = False
        finally:
            tracker.finish_pipeline(failed)
        log.info("pipeline finished in %.1f s", time.monotonic() - started)
        if tracker.not_logged():
            log.warning("%s", tracker.not_logged())
        return run.records
    finally:
        if own:
            run_dir.close()


def _run_stage(stage: Stage, run: Run, state: RunState, forced: bool, position: str) -> StageRecord:
    fp = stage.fingerprint(run)
    same = not forced and state.matches(stage.name, fp)
    if same and state.finished(stage.name) and stage.complete(run):
        log.info("%s: unchanged since the last run, skipped", position)
        record = StageRecord(**{k: v for k, v in state.stages[stage.name].items() if k != "finished"})
        record.summary = {**record.summary, "skipped": True}
        record.seconds = 0.0
        state.record(stage.name, record)  # stages.json (and the report) describes this run, not the last one
        run.tracker.skipped(stage.name, record.output)
        return record
    log.info("%s ...", position)
    started = time.monotonic()
    # A stage resuming its own unfinished work continues its MLflow run; one that runs again gets a new one.
    unfinished = same and not state.finished(stage.name)
    state.started(stage.name, fp)
    run.stage_run = run.tracker.stage_run(stage.name, resume=unfinished)
    try:
        with spark_progress(run.spark):
            output, summary = stage.work(run, same)
    except BaseException:
        run.tracker.finish(run.stage_run, failed=True)
        raise
    record = StageRecord(fp, output, time.monotonic() - started, summary)
    run.tracker.stage_done(run.stage_run, record)
    state.record(stage.name, record)
    log.info("%s done in %.1f s", position, record.seconds)
    return record


def open_run_directory(cfg: Config) -> WorkingCopy:
    """The run directory, once every output the project writes itself is proven writable."""
    check_outputs(cfg)
    run_dir = WorkingCopy(cfg.output.run_dir)
    run_dir.dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def check_outputs(cfg: Config) -> None:
    """Proves that the outputs the project writes itself (sparkml_par.io.store) can be written: a bad one fails
    in seconds, before the session starts, not after prepare and an epoch of training."""
    Store(cfg.output.run_dir).check_writable("output.run_dir")
    Store(cfg.train.output).check_writable("train.output")
    if cfg.tune.space:
        Store(cfg.tune.output).check_writable("tune.output")
    score_url = qualify_url(cfg.score.output)
    if score_url.startswith("file://"):  # elsewhere Spark's filesystem is asked once the session is up
        local_files.check_writable_directory(local_path(score_url), "score.output")


def pipeline_stages() -> tuple[Stage, ...]:
    """The stages in their order, imported on the first call rather than with this module: `run` imports them
    while the driver JVM starts."""
    from data_prep.job import STAGE as PREPARE
    from sparkml_par.infer.score import STAGE as SCORE
    from sparkml_par.report import STAGE as REPORT
    from sparkml_par.train.job import STAGE as TRAIN
    from sparkml_par.tune.job import STAGE as TUNE

    return (PREPARE, TUNE, TRAIN, SCORE, REPORT)


def run(cfg: Config) -> int:
    """Entry point of `sparkml-par run`: the pipeline, its log in the run directory, a final summary."""
    run_dir = open_run_directory(cfg)
    tracker = Tracker(cfg.tracking, run_dir.dir)
    tracker.start(cfg)  # tracking.required fails here, before the session starts
    log_file = run_dir.dir / RUN_LOG
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    started = time.monotonic()
    size = input_bytes(cfg.data, SHORT_RUN_INPUT_BYTES)
    try:
        # The stages' modules (torch and matplotlib among their imports) load while the driver JVM starts in its
        # own process.
        with ThreadPoolExecutor(1, thread_name_prefix="import-stages") as importing:
            stages = importing.submit(pipeline_stages)
            with spark_session(cfg.spark, log_file, size, TORCH_WORKERS) as spark:
                stages.result()
                records = run_pipeline(spark, cfg, run_dir, tracker)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
        run_dir.close()  # run.log, complete, goes where output.run_dir is
    print(summary(records, run_dir.store.url, time.monotonic() - started, tracker.not_logged()))
    return 0


def summary(records: dict[str, StageRecord], run_dir: str, seconds: float, tracked: str | None = None) -> str:
    lines = [f"run directory {run_dir}"]
    for name, record in records.items():
        skipped = " (skipped: unchanged)" if record.summary.get("skipped") else f" ({record.seconds:.1f} s)"
        lines.append(f"  {name:<8} {record.output}{skipped}")
    metrics = records["score"].summary.get("metrics") or records["train"].summary.get("test") or {}
    if "accuracy" in metrics:
        lines.append(f"test accuracy {metrics['accuracy']:.4f}")
    for key in ("mse", "mae"):
        if key in metrics:
            lines.append(f"test {key} {metrics[key]:.4f}")
    lines.append(f"report {records['report'].output}")
    if tracked:
        lines.append(tracked)
    lines.append(f"wall time {seconds:.1f} s")
    return "\n".join(lines)
