"""Driver side of a search: check the request, run the trials, write the table, best config and plot.

    sparkml-par tune conf/tune.yaml [section.key=value ...]

Running it again with the same tune.output continues the study (see `study.py`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

from sparkml_par.config import Config
from sparkml_par.contract import MANIFEST_TASK
from sparkml_par.errors import SparkmlParError
from sparkml_par.io.hadoop import qualify_url
from sparkml_par.io.store import Store, WorkingCopy, local_file
from sparkml_par.spark_runtime.session import require_classic_session
from sparkml_par.stage import Run, Stage, fingerprint
from sparkml_par.tune import outputs
from sparkml_par.tune.search_loop import run_search
from sparkml_par.tune.space import SearchSpace, check_space_fits
from sparkml_par.tune.study import Search
from sparkml_par.tune.trials import SparkTrials, check_metric

log = logging.getLogger("sparkml_par.tune")


@dataclass
class TuneResult:
    trials: list[dict[str, Any]]  # every trial of the study, as in trials.json
    best: dict[str, Any] | None  # the best trial's row; None when no trial completed
    best_config: str | None  # best.yaml, ready for `sparkml-par train`
    table_csv: str
    table_json: str
    plot: str
    ran: int  # trials this call ran (a resumed study holds more)
    retrained: Any = None  # sparkml_par.train.job.TrainResult when tune.retrain
    seconds: float = 0.0


def tune(spark, cfg: Config) -> TuneResult:
    """Runs the search cfg.tune describes on the dataset at cfg.data.output."""
    from data_prep.manifest import read_manifest

    require_classic_session(spark, "tune")
    started = time.monotonic()
    Store(cfg.tune.output).check_writable("tune.output")
    space = SearchSpace.from_config(cfg.tune.space)
    check_space_fits(cfg, space)
    dataset_url = qualify_url(cfg.data.output)
    manifest = read_manifest(spark, dataset_url)
    if manifest is None:
        raise SparkmlParError(
            f"no dataset at data.output={cfg.data.output!r} (no _manifest.json); "
            f"run `sparkml-par prepare` with the same config first"
        )
    check_metric(cfg.tune.metric, manifest[MANIFEST_TASK])
    _warn_if_parallelism_exceeds_slots(spark, cfg.tune.parallelism)

    # The study is sqlite: a local working copy of a remote tune.output, pushed after every told trial, so
    # a search interrupted on one machine resumes on another and redoes at most the trials then running.
    out = WorkingCopy(cfg.tune.output)
    search = Search.open(cfg.tune, space, out.dir)
    already = len(search.finished_trials())
    log.info(
        "%s search of %s: %d of %d trials done, %d at a time, %s %s",
        cfg.tune.method,
        ", ".join(space.params),
        already,
        search.budget,
        cfg.tune.parallelism,
        cfg.tune.direction,
        cfg.tune.metric,
    )
    evaluate = SparkTrials(spark, cfg, manifest, dataset_url, out.url("trials"))

    def write_reports(_frozen=None) -> None:
        _write_reports(search, cfg, out)

    try:
        ran = run_search(search, evaluate, cfg.tune.parallelism, on_finished=write_reports)
        rows, best_row, best_path = _write_reports(search, cfg, out)
    finally:
        out.close()
    result = TuneResult(
        trials=rows,
        best=best_row,
        best_config=out.url("best.yaml") if best_path else None,
        table_csv=out.url("trials.csv"),
        table_json=out.url("trials.json"),
        plot=out.url("scores.png"),
        ran=ran,
    )
    if best_row is None:
        errors = [r["error"] for r in rows if r["error"]]
        raise SparkmlParError(
            f"no trial of the search completed ({len(rows)} trials, see {result.table_csv}); "
            f"the first error: {errors[0] if errors else 'none recorded'}"
        )
    if cfg.tune.retrain:
        result.retrained = _retrain(spark, result.best_config)
    result.seconds = time.monotonic() - started
    return result


def _write_reports(search: Search, cfg: Config, out: WorkingCopy):
    """The tables, the plot and best.yaml in the workspace, then the workspace pushed to tune.output."""
    rows = outputs.trial_rows(search.study, search.space)
    outputs.write_table(rows, out.dir)
    outputs.plot_scores(rows, cfg.tune.metric, cfg.tune.direction, out.dir / "scores.png")
    best = outputs.best_trial(search.study)
    path = None
    if best is not None:
        path = out.dir / "best.yaml"
        outputs.write_best_config(cfg, best, search.space, cfg.tune.metric, path)
    out.push()
    return rows, (rows[best.number] if best is not None else None), path


def _retrain(spark, best_url: str):
    from sparkml_par.config import load_config
    from sparkml_par.train.job import train

    with local_file(best_url) as best:
        best_cfg = load_config(best)
    log.info("retraining the best config with %d ranks into %s", best_cfg.train.num_proc, best_cfg.train.output)
    return train(spark, best_cfg)


def _warn_if_parallelism_exceeds_slots(spark, parallelism: int) -> None:
    from sparkml_par.launch.slots import concurrent_task_slots, describe_slots

    slots = concurrent_task_slots(spark.sparkContext)
    if 0 < slots < parallelism:
        log.warning(
            "tune.parallelism=%d but the cluster has %s: at most %d trials run at once, the others wait",
            parallelism,
            describe_slots(spark.sparkContext, slots),
            slots,
        )


def summary(result: TuneResult, metric: str) -> str:
    counts: dict[str, int] = {}
    for row in result.trials:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    lines = [
        f"{len(result.trials)} trials ({', '.join(f'{n} {s}' for s, n in counts.items())}), "
        f"{result.ran} run now, {result.seconds:.1f} s"
    ]
    if result.best is not None:
        params = " ".join(f"{k}={v}" for k, v in result.best["params"].items())
        lines += [
            f"  best          trial {result.best['number']}: {metric}={result.best['score']:.4f}",
            f"  params        {params}",
            f"  best config   {result.best_config}",
        ]
    lines += [f"  table         {result.table_csv}", f"  plot          {result.plot}"]
    if result.retrained is not None:
        lines.append(f"  retrained     {result.retrained.artifact}")
    return "\n".join(lines)


def run(cfg: Config) -> int:
    """Entry point of `sparkml-par tune`."""
    from sparkml_par.spark_runtime.session import TORCH_WORKERS, run_stage

    return run_stage(
        cfg,
        lambda spark: tune(spark, cfg),
        lambda result: summary(result, cfg.tune.metric),
        worker_imports=TORCH_WORKERS,
    )


def _stage_work(run: Run, _resume: bool):
    result = tune(run.spark, run.cfg)
    for trial in result.trials:
        run.tracker.trial(run.stage_run, trial, run.cfg.tune.metric)
    return result.best_config, {"best": result.best, "trials": len(result.trials)}


STAGE = Stage(
    "tune",
    lambda run: fingerprint(asdict(run.cfg.tune), asdict(run.cfg.train), run.dataset_fingerprint()),
    lambda run: Store(run.cfg.tune.output).exists("best.yaml"),
    _stage_work,
)
