"""Scoring API and job: `score` builds the predictions, `score_job` writes and evaluates them.

Output columns: the id column, `prediction` (class index as bigint, or the regression value as
float), `probabilities` (array<float>, one per class) for classification, and the label when the
input has it. `score_job` writes them as Parquet to score.output, with `_metrics.json` inside that
directory (run facts, and accuracy / precision / recall / confusion matrix or MSE / MAE when labels
are present), and prints the metrics.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from sparkml_par.config import Config
from sparkml_par.errors import SparkmlParError
from sparkml_par.infer import inputs, metrics, publish
from sparkml_par.infer.arrow_predict import output_schema, predict_batches

log = logging.getLogger("sparkml_par.infer")

_FEATURES = "_checked_features"


@dataclass
class ScoreResult:
    output: str
    rows: int
    metrics: dict[str, Any] | None
    seconds: float


def score(spark, df_or_path, model_dir: str, id_column: str = "_row_id", batch_size: int = 1024):
    """Lazy DataFrame of predictions for a DataFrame or a path (see inputs.read_input) scored by an artifact."""
    from sparkml_par.train.artifact import load_model_artifact

    if batch_size < 1:
        raise SparkmlParError(f"score.batch_size={batch_size!r}: rows per model call must be at least 1")
    _, description = load_model_artifact(model_dir)  # on the driver: a missing or broken artifact fails here
    is_path = isinstance(df_or_path, (str, os.PathLike))
    df = inputs.read_input(spark, os.fspath(df_or_path)) if is_path else df_or_path
    inputs.require_id_column(df, id_column)
    df = inputs.with_features(df, description)
    label = inputs.label_column(df, description)
    features = inputs.checked_features(df, description, id_column)
    carried = [id_column] + ([label] if label and label != id_column else [])
    checked = df.select(*[f"`{c}`" for c in carried], features.alias(_FEATURES))
    predict = predict_batches(_local_artifact_path(model_dir), description, _FEATURES, carried, batch_size)
    return checked.mapInArrow(predict, output_schema(df, carried, description["task"]))


def score_job(spark, cfg: Config) -> ScoreResult:
    """Scores score.input (default: the model's test split) and publishes predictions and metrics."""
    from sparkml_par.train.artifact import load_model_artifact

    model_dir = cfg.score.model or f"{cfg.train.output.rstrip('/')}/model"
    _, description = load_model_artifact(model_dir)
    source = cfg.score.input or f"{description['dataset']}/{inputs.DEFAULT_SPLIT}"
    url = publish.output_url(cfg.score.output)
    publish.check_output(spark, url)
    predictions = score(spark, source, model_dir, cfg.score.id_column, cfg.score.batch_size)
    label = description.get("label_column") if description.get("label_column") in predictions.columns else None

    started = time.monotonic()
    staging = publish.staging_url(url)
    try:
        _run_spark_action(lambda: predictions.write.parquet(staging), source)
        seconds = time.monotonic() - started
        written = spark.read.parquet(staging)  # evaluate what was written: the model does not run again
        rows = written.count()
        log.info("scored %d rows in %.1f s (%.0f rows/s)", rows, seconds, rows / max(seconds, 1e-9))
        evaluation = (metrics.evaluate(written, label, description["task"], int(description["num_classes"] or 0))
                      if label else None)
        publish.write_metrics_file(spark, staging, {
            "model": model_dir, "input": source, "rows": rows, "task": description["task"],
            "columns": written.columns, "seconds": round(seconds, 3), "metrics": evaluation})
        publish.publish(spark, staging, url)
    except BaseException:
        publish.discard(spark, staging)
        raise
    return ScoreResult(output=url, rows=rows, metrics=evaluation, seconds=seconds)


def _run_spark_action(action, source: str) -> None:
    """Runs a Spark action; a failed per-row input check, or an input file Spark cannot read, becomes a
    SparkmlParError with the row's message or the file's name."""
    from data_prep.ingest import unreadable_file_error

    try:
        action()
    except Exception as exc:
        error = inputs.user_error_in(exc) or unreadable_file_error(exc, "score.input", source, "Parquet")
        if error is None:
            raise
        raise error from None


def _local_artifact_path(model_dir: str) -> str:
    """The path the executors load from: the artifact is a local or mounted directory (see train.job)."""
    from pathlib import Path

    return str(Path(str(model_dir).removeprefix("file://")).absolute())


def summary(result: ScoreResult) -> str:
    lines = [f"predictions {result.output}",
             f"  rows          {result.rows}",
             f"  {result.seconds:.1f} s, {result.rows / max(result.seconds, 1e-9):.0f} rows/s"]
    if result.metrics is None:
        lines.append("  no label column in the input: predictions not evaluated")
    else:
        lines += metrics.metrics_summary(result.metrics)
    lines.append(f"  metrics       {result.output}/{publish.METRICS_FILE}")
    return "\n".join(lines)


def run(cfg: Config) -> int:
    """Entry point of `sparkml-par score`."""
    from sparkml_par.session import run_stage

    return run_stage(cfg, lambda spark: score_job(spark, cfg), summary)
