"""The whole pipeline in one Spark application: prepare -> tune (when configured) -> train -> score -> report.

Each stage records a fingerprint: a hash of its config section and of its inputs' fingerprints. A
re-run skips a stage whose fingerprint matches and whose output is complete, so re-running after a
crash redoes only what is missing; `--from STAGE` (output.from_stage) forces a stage and all after it.
The run directory holds the effective config, `stages.json` (each stage's fingerprint, outputs and
time), the log and the report.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

from sparkml_par.config import Config, load_config
from sparkml_par.contract import (CONFIG_COPY, MANIFEST_FINGERPRINT, MANIFEST_QUARANTINE, MANIFEST_ROWS_CLEAN,
                                  MODEL_DIR, RUN_LOG, SCORE_METRICS, WEIGHTS)
from sparkml_par.progress import spark_progress
from sparkml_par.session import spark_session
from sparkml_par.storage import check_writable_directory, check_writable_url, qualify_url

log = logging.getLogger("sparkml_par.pipeline")

STAGES = ("prepare", "tune", "train", "score", "report")


@dataclasses.dataclass
class StageRecord:
    fingerprint: str
    output: str
    seconds: float
    summary: dict[str, Any]


class RunState:
    """stages.json of a run directory, rewritten atomically when a stage starts and when it finishes.

    A stage that started but never finished (the run was killed) keeps its fingerprint, so the next
    run knows its partial output (e.g. training checkpoints) belongs to the same config.
    """

    def __init__(self, run_dir: Path):
        self.path = run_dir / "stages.json"
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
        temp = self.path.with_name(".stages.json.tmp")
        temp.write_text(json.dumps(self.stages, indent=2, default=str))
        os.replace(temp, self.path)


def fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_pipeline(spark, cfg: Config) -> dict[str, StageRecord]:
    """Runs every stage that is due; returns the records of all stages of this run."""
    from data_prep.job import prepare
    from sparkml_par.report import write_report

    run_dir = check_local_outputs(cfg)
    check_writable_url(spark, qualify_url(cfg.score.output), "score.output")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_COPY).write_text(cfg.to_yaml())
    state = RunState(run_dir)
    forced = STAGES.index(cfg.output.from_stage) if cfg.output.from_stage else len(STAGES)
    tuning = bool(cfg.tune.space)
    records: dict[str, StageRecord] = {}
    started = time.monotonic()

    def stage(index: int, name: str, fp: str, complete: Callable[[], bool],
              work: Callable[[bool], tuple[str, dict[str, Any]]]) -> StageRecord:
        position = f"[{index}/{len(STAGES) if tuning else len(STAGES) - 1}] {name}"
        same = STAGES.index(name) < forced and state.matches(name, fp)
        if same and state.finished(name) and complete():
            log.info("%s: unchanged since the last run, skipped", position)
            record = StageRecord(**{k: v for k, v in state.stages[name].items() if k != "finished"})
            record.summary = {**record.summary, "skipped": True}
            record.seconds = 0.0
            state.record(name, record)  # stages.json (and the report) describes this run, not the last one
        else:
            log.info("%s ...", position)
            stage_started = time.monotonic()
            state.started(name, fp)
            # Work may continue from its own partial output only if nothing changed and nothing was forced.
            with spark_progress(spark):
                output, summary = work(same)
            record = StageRecord(fp, output, time.monotonic() - stage_started, summary)
            state.record(name, record)
            log.info("%s done in %.1f s", position, record.seconds)
        records[name] = record
        return record

    def do_prepare(_same: bool):
        result = prepare(spark, cfg.data, owner=str(run_dir))
        m = result.manifest
        return result.output, {"fingerprint": m[MANIFEST_FINGERPRINT], "rows_clean": m[MANIFEST_ROWS_CLEAN],
                               "quarantined": m[MANIFEST_QUARANTINE]["rows"], "skipped": result.skipped}

    # prepare is a no-op inside data_prep when its input and config are unchanged, so it always runs.
    data = stage(1, "prepare", fingerprint(dataclasses.asdict(cfg.data)), lambda: False, do_prepare)
    train_cfg = cfg
    position = 2
    if tuning:
        tune_fp = fingerprint(dataclasses.asdict(cfg.tune), dataclasses.asdict(cfg.train), data.summary["fingerprint"])
        tuned = stage(position, "tune", tune_fp, lambda: Path(cfg.tune.output, "best.yaml").exists(),
                      lambda _same: _tune(spark, cfg))
        train_cfg = load_config(tuned.output, [f"train.output={cfg.train.output}"])
        position += 1

    train_fp = fingerprint(dataclasses.asdict(train_cfg.train), data.summary["fingerprint"])
    model_dir = Path(train_cfg.train.output, MODEL_DIR)
    trained = stage(position, "train", train_fp, lambda: (model_dir / WEIGHTS).exists(),
                    lambda resume: _train(spark, train_cfg, resume))
    score_fp = fingerprint(dataclasses.asdict(cfg.score), trained.fingerprint)
    stage(position + 1, "score", score_fp,
                   lambda: Path(cfg.score.output.removeprefix("file://"), SCORE_METRICS).exists(),
                   lambda _same: _score(spark, cfg))

    def do_report(_same: bool):
        return str(write_report(run_dir, cfg)), {}

    stage(position + 2, "report", fingerprint(time.time()), lambda: False, do_report)
    log.info("pipeline finished in %.1f s", time.monotonic() - started)
    return records


def check_local_outputs(cfg: Config) -> Path:
    """Proves that the outputs the driver writes with plain file I/O can be written: a bad one fails in
    seconds, before the session starts, not after prepare and an epoch of training."""
    from sparkml_par.train.job import local_path
    from sparkml_par.tune.job import output_dir

    run_dir = Path(cfg.output.run_dir).absolute()
    check_writable_directory(run_dir, "output.run_dir")
    check_writable_directory(Path(local_path(cfg.train.output)), "train.output")
    if cfg.tune.space:
        check_writable_directory(output_dir(cfg.tune.output), "tune.output")
    score_url = qualify_url(cfg.score.output)
    if score_url.startswith("file://"):  # elsewhere Spark's filesystem is asked once the session is up
        check_writable_directory(Path(score_url.removeprefix("file://")), "score.output")
    return run_dir


def _tune(spark, cfg: Config):
    from sparkml_par.tune.job import tune

    result = tune(spark, cfg)
    return result.best_config, {"best": result.best, "trials": len(result.trials)}


def _train(spark, cfg: Config, resume: bool):
    from sparkml_par.train.job import train

    # A changed train config starts over: its checkpoints would continue a different run.
    run_cfg = cfg if resume else dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, resume="never"))
    result = train(spark, run_cfg)
    return result.artifact, {"test": result.test, "epochs_run": result.epochs_run}


def _score(spark, cfg: Config):
    from sparkml_par.infer.score import score_job

    result = score_job(spark, cfg)
    return result.output, {"rows": result.rows, "metrics": result.metrics}


def run(cfg: Config) -> int:
    """Entry point of `sparkml-par run`: the pipeline, its log in the run directory, a final summary."""
    run_dir = check_local_outputs(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    log_file = run_dir / RUN_LOG
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    started = time.monotonic()
    try:
        with spark_session(cfg.spark, log_file) as spark:
            records = run_pipeline(spark, cfg)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    print(summary(records, run_dir, time.monotonic() - started))
    return 0


def summary(records: dict[str, StageRecord], run_dir: Path, seconds: float) -> str:
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
    lines.append(f"wall time {seconds:.1f} s")
    return "\n".join(lines)
