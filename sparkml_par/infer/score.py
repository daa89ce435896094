"""Scoring API and job: `score` builds the predictions, `score_job` writes and evaluates them.

Output columns: the id column, `prediction` (class index as bigint, or the regression value as
float), `probabilities` (array<float>, one per class) for classification, and the label when the
input has it. `score_job` writes them as Parquet to score.output, with `_metrics.json` inside that
directory (run facts, and accuracy / precision / recall / confusion matrix or MSE / MAE when labels
are present), and prints the metrics.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

from sparkml_par.config import Config
from sparkml_par.contract import (
    MODEL_DIR,
    PREDICTED_LABEL,
    PREDICTION,
    ROW_ID,
    SCORE_METRICS,
    SCORE_QUARANTINE_DIR,
    quoted,
)
from sparkml_par.errors import SparkmlParError
from sparkml_par.infer import inputs, metrics, publish
from sparkml_par.infer.arrow_predict import output_schema, predict_batches
from sparkml_par.io.hadoop import check_writable_url, staging_url
from sparkml_par.io.store import Store
from sparkml_par.spark_runtime.session import require_classic_session
from sparkml_par.spark_runtime.spark_jobs import JobName, spark_job
from sparkml_par.stage import Run, Stage, fingerprint

log = logging.getLogger("sparkml_par.infer")

_FEATURES = "_checked_features"


@dataclass
class ScoreResult:
    output: str
    rows: int
    metrics: dict[str, Any] | None
    seconds: float
    rejected: dict[str, Any] | None = None  # raw input rows the dataset's checks rejected, by reason


def score(
    spark, df_or_path, model_dir: str, id_column: str = ROW_ID, batch_size: int = 1024, source: str | None = None
):
    """Lazy DataFrame of predictions for a DataFrame or a path (see inputs.scoring_input) scored by an artifact.

    Raw rows that fail the checks of the model's dataset are not scored; `score_job` keeps them, with
    their reason, beside the predictions.
    """
    from sparkml_par.train.artifact import load_model_artifact

    _, description = load_model_artifact(model_dir)  # on the driver: a missing or broken artifact fails here
    return _predictions(spark, df_or_path, model_dir, description, id_column, batch_size, source)[0]


def _predictions(
    spark, df_or_path, model_dir: str, description: dict[str, Any], id_column: str, batch_size: int, source: str | None
):
    """(lazy predictions, the scoring input they come from) for the artifact at model_dir."""
    if batch_size < 1:
        raise SparkmlParError(f"score.batch_size={batch_size!r}: rows per model call must be at least 1")
    scoring = inputs.scoring_input(spark, df_or_path, description, source)
    df = scoring.rows
    if scoring.raw and id_column == ROW_ID:
        log.info(
            "rows are identified by %s, a hash of each row's content; set score.id_column to name an id "
            "column of the input instead",
            ROW_ID,
        )
    inputs.require_id_column(df, id_column)
    label = inputs.label_column(df, description)
    features = inputs.checked_features(df, description, id_column)
    carried = [id_column] + ([label] if label and label != id_column else [])
    checked = df.select(*[quoted(c) for c in carried], features.alias(_FEATURES))
    predict = predict_batches(Store(model_dir).url, description, _FEATURES, carried, batch_size)
    predictions = checked.mapInArrow(predict, output_schema(df, carried, description["task"]))
    return _with_class_names(predictions, description.get("classes")), scoring


def _with_class_names(predictions, classes: list[str] | None):
    """`predicted_label`, the name of the predicted class, when the classes have names (text labels, images)."""
    from pyspark.sql import functions as F

    if not classes:
        return predictions
    names = F.array(*[F.lit(str(c)) for c in classes])
    return predictions.withColumn(PREDICTED_LABEL, F.element_at(names, F.col(PREDICTION).cast("int") + 1))


def score_job(spark, cfg: Config) -> ScoreResult:
    """Scores score.input (default: the model's test split) and publishes predictions and metrics."""
    from data_prep.ingest import reading_raw_rows

    require_classic_session(spark, "score")
    # A raw CSV input: its rows are counted and scored alike.
    with reading_raw_rows(spark), spark_job(spark.sparkContext, "score: read the input") as step:
        return _score_job(spark, cfg, step)


def _score_job(spark, cfg: Config, step: JobName) -> ScoreResult:
    from sparkml_par.train.artifact import load_model_artifact

    url = publish.output_url(cfg.score.output)
    publish.check_output(spark, url)
    check_writable_url(spark, url, "score.output")
    model_dir = cfg.score.model or f"{cfg.train.output.rstrip('/')}/{MODEL_DIR}"
    _, description = load_model_artifact(model_dir)
    source = cfg.score.input or f"{description['dataset']}/{inputs.DEFAULT_SPLIT}"
    predictions, scoring = _predictions(
        spark, source, model_dir, description, cfg.score.id_column, cfg.score.batch_size, cfg.score.source
    )
    label = description.get("label_column") if description.get("label_column") in predictions.columns else None

    started = time.monotonic()
    staging = staging_url(url)
    try:
        step.rename("score: predict and write")
        _run_spark_action(
            lambda: predictions.write.parquet(staging), source, lambda: inputs.width_mismatch(scoring.rows, description)
        )
        step.rename("score: quarantine")
        rejected = _write_rejected(scoring, staging)
        seconds = time.monotonic() - started
        step.rename("score: evaluate")
        written = spark.read.parquet(staging)  # evaluate what was written: the model does not run again
        evaluation = (
            metrics.evaluate(
                written, label, description["task"], int(description["num_classes"] or 0), description.get("classes")
            )
            if label
            else None
        )
        # The evaluation's aggregate counts every row, labelled or not; without a label the rows are counted alone.
        rows = evaluation["rows_evaluated"] + evaluation["rows_unlabelled"] if evaluation else written.count()
        log.info("scored %d rows in %.1f s (%.0f rows/s)", rows, seconds, rows / max(seconds, 1e-9))
        publish.write_metrics_file(
            spark,
            staging,
            {
                "model": model_dir,
                "input": source,
                "rows": rows,
                "task": description["task"],
                "columns": written.columns,
                "seconds": round(seconds, 3),
                "rejected": rejected,
                "metrics": evaluation,
            },
        )
        publish.publish(spark, staging, url)
    except BaseException:
        publish.discard(spark, staging)
        raise
    return ScoreResult(output=url, rows=rows, metrics=evaluation, seconds=seconds, rejected=rejected)


def _write_rejected(scoring: inputs.ScoringInput, staging: str) -> dict[str, Any] | None:
    """Raw rows the dataset's checks rejected go under the predictions' `_quarantine/` (Parquet readers of
    the predictions skip `_` names), counted by reason; None when the input came prepared."""
    if not scoring.raw:
        return None
    if scoring.reasons:
        scoring.rejected.write.parquet(f"{staging}/{SCORE_QUARANTINE_DIR}")
    return {
        "path": SCORE_QUARANTINE_DIR,
        "rows": sum(scoring.reasons.values()),
        "rows_in": scoring.rows_in,
        "reasons": scoring.reasons,
    }


def _run_spark_action(action, source: str, width_mismatch) -> None:
    """Runs a Spark action; a failed per-row input check, or an input file Spark cannot read, becomes a
    SparkmlParError with the row's message or the file's name. A row of the wrong length whose input
    begins with one too is reported as data of another width (`width_mismatch()`, a job of its own)."""
    from data_prep.ingest import unreadable_file_error

    try:
        action()
    except Exception as exc:
        row_error = inputs.user_error_in(exc)
        if row_error is not None:
            raise (width_mismatch() or row_error) from None
        error = unreadable_file_error(exc, "score.input", source, "Parquet")
        if error is None:
            raise
        raise error from None


def summary(result: ScoreResult) -> str:
    lines = [
        f"predictions {result.output}",
        f"  rows          {result.rows}",
        f"  {result.seconds:.1f} s, {result.rows / max(result.seconds, 1e-9):.0f} rows/s",
    ]
    if result.rejected and result.rejected["rows"]:
        lines.append(
            f"  rejected      {result.rejected['rows']} of {result.rejected['rows_in']} input rows, in "
            f"{result.output}/{result.rejected['path']}"
        )
        lines += [f"    {reason:<28} {n}" for reason, n in result.rejected["reasons"].items()]
    if result.metrics is None:
        lines.append("  no label column in the input: predictions not evaluated")
    else:
        lines += metrics.metrics_summary(result.metrics)
    lines.append(f"  metrics       {result.output}/{SCORE_METRICS}")
    return "\n".join(lines)


def run(cfg: Config) -> int:
    """Entry point of `sparkml-par score`."""
    from sparkml_par.spark_runtime.session import TORCH_WORKERS, run_stage

    return run_stage(cfg, lambda spark: score_job(spark, cfg), summary, worker_imports=TORCH_WORKERS)


def _stage_work(run: Run, _resume: bool):
    result = score_job(run.spark, run.cfg)
    return result.output, {"rows": result.rows, "metrics": result.metrics}


STAGE = Stage(
    "score",
    lambda run: fingerprint(asdict(run.cfg.score), run.records["train"].fingerprint),
    lambda run: publish.published(run.spark, publish.output_url(run.cfg.score.output)),
    _stage_work,
)
