"""The whole pipeline in one Spark application: prepare -> tune (when configured) -> train -> score -> report.

Each stage records a fingerprint: a hash of its config section and of its inputs' fingerprints. A
re-run skips a stage whose fingerprint matches and whose output is complete, so re-running after a
crash redoes only what is missing; `--from STAGE` (output.from_stage) forces a stage and all after it.
The run directory holds the effective config, `stages.json` (each stage's fingerprint, outputs and
time), the log and the report.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable

from sparkml_par import atomic
from sparkml_par.config import Config, load_config
from sparkml_par.contract import (
    CONFIG_COPY,
    MANIFEST_FINGERPRINT,
    MANIFEST_QUARANTINE,
    MANIFEST_ROWS_CLEAN,
    MODEL_DIR,
    RUN_LOG,
    SCORE_METRICS,
    WEIGHTS,
)
from sparkml_par.progress import spark_progress
from sparkml_par.session import spark_session
from sparkml_par.storage import check_writable_directory, check_writable_url, qualify_url

log = logging.getLogger("sparkml_par.pipeline")


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
        atomic.write_text(self.path, json.dumps(self.stages, indent=2, default=str))


def fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclasses.dataclass
class Run:
    """What the stages of one run share: the session, the config, the run directory and the records so far."""

    spark: Any
    cfg: Config
    run_dir: Path
    records: dict[str, StageRecord] = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def train_cfg(self) -> Config:
        """The config training uses: the tuned best config when this run tuned, else the run's own."""
        tuned = self.records.get("tune")
        return load_config(tuned.output, [f"train.output={self.cfg.train.output}"]) if tuned else self.cfg

    def dataset_fingerprint(self) -> str:
        return self.records["prepare"].summary["fingerprint"]


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage as data. Its fingerprint hashes what its work depends on (its config section and the
    fingerprints of its inputs); a stage whose fingerprint matches the last run's and whose output is
    complete is skipped. `work(run, resume)` returns (output, summary); resume is true when the stage
    may continue from its own partial output (nothing changed, nothing forced)."""

    name: str
    fingerprint: Callable[[Run], str]
    complete: Callable[[Run], bool]
    work: Callable[[Run, bool], tuple[str, dict[str, Any]]]


def run_pipeline(spark, cfg: Config) -> dict[str, StageRecord]:
    """Runs every stage that is due; returns the records of all stages of this run."""
    run_dir = check_local_outputs(cfg)
    check_writable_url(spark, qualify_url(cfg.score.output), "score.output")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_COPY).write_text(cfg.to_yaml())
    state = RunState(run_dir)
    forced = set(STAGES[STAGES.index(cfg.output.from_stage) :]) if cfg.output.from_stage else set()
    stages = [stage for stage in PIPELINE if stage.name != "tune" or cfg.tune.space]
    run = Run(spark, cfg, run_dir)
    started = time.monotonic()
    for index, stage in enumerate(stages, 1):
        run.records[stage.name] = _run_stage(
            stage, run, state, stage.name in forced, f"[{index}/{len(stages)}] {stage.name}"
        )
    log.info("pipeline finished in %.1f s", time.monotonic() - started)
    return run.records


def _run_stage(stage: Stage, run: Run, state: RunState, forced: bool, position: str) -> StageRecord:
    fp = stage.fingerprint(run)
    same = not forced and state.matches(stage.name, fp)
    if same and state.finished(stage.name) and stage.complete(run):
        log.info("%s: unchanged since the last run, skipped", position)
        record = StageRecord(**{k: v for k, v in state.stages[stage.name].items() if k != "finished"})
        record.summary = {**record.summary, "skipped": True}
        record.seconds = 0.0
        state.record(stage.name, record)  # stages.json (and the report) describes this run, not the last one
        return record
    log.info("%s ...", position)
    started = time.monotonic()
    state.started(stage.name, fp)
    with spark_progress(run.spark):
        output, summary = stage.work(run, same)
    record = StageRecord(fp, output, time.monotonic() - started, summary)
    state.record(stage.name, record)
    log.info("%s done in %.1f s", position, record.seconds)
    return record


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


def _prepare(run: Run, _resume: bool):
    from data_prep.job import prepare

    result = prepare(run.spark, run.cfg.data, owner=str(run.run_dir))
    m = result.manifest
    return result.output, {
        "fingerprint": m[MANIFEST_FINGERPRINT],
        "rows_clean": m[MANIFEST_ROWS_CLEAN],
        "quarantined": m[MANIFEST_QUARANTINE]["rows"],
        "skipped": result.skipped,
    }


def _tune(run: Run, _resume: bool):
    from sparkml_par.tune.job import tune

    result = tune(run.spark, run.cfg)
    return result.best_config, {"best": result.best, "trials": len(result.trials)}


def _train(run: Run, resume: bool):
    from sparkml_par.train.job import train

    cfg = run.train_cfg
    # A changed train config starts over: its checkpoints would continue a different run.
    cfg = cfg if resume else dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, resume="never"))
    result = train(run.spark, cfg)
    return result.artifact, {"test": result.test, "epochs_run": result.epochs_run}


def _score(run: Run, _resume: bool):
    from sparkml_par.infer.score import score_job

    result = score_job(run.spark, run.cfg)
    return result.output, {"rows": result.rows, "metrics": result.metrics}


def _report(run: Run, _resume: bool):
    from sparkml_par.report import write_report

    return str(write_report(run.run_dir, run.cfg)), {}


def _never(_run: Run) -> bool:
    return False


PIPELINE = (
    # data_prep skips an unchanged dataset itself (it compares the input's fingerprint), so prepare always runs.
    Stage("prepare", lambda run: fingerprint(dataclasses.asdict(run.cfg.data)), _never, _prepare),
    Stage(
        "tune",
        lambda run: fingerprint(
            dataclasses.asdict(run.cfg.tune), dataclasses.asdict(run.cfg.train), run.dataset_fingerprint()
        ),
        lambda run: Path(run.cfg.tune.output, "best.yaml").exists(),
        _tune,
    ),
    Stage(
        "train",
        lambda run: fingerprint(dataclasses.asdict(run.train_cfg.train), run.dataset_fingerprint()),
        lambda run: Path(run.train_cfg.train.output, MODEL_DIR, WEIGHTS).exists(),
        _train,
    ),
    Stage(
        "score",
        lambda run: fingerprint(dataclasses.asdict(run.cfg.score), run.records["train"].fingerprint),
        lambda run: Path(run.cfg.score.output.removeprefix("file://"), SCORE_METRICS).exists(),
        _score,
    ),
    # The report reads every stage's output as it is now: always written again.
    Stage("report", lambda run: fingerprint([record.fingerprint for record in run.records.values()]), _never, _report),
)
STAGES = tuple(stage.name for stage in PIPELINE)


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
