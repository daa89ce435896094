"""Predictions appear at score.output complete or not at all.

Spark writes the Parquet files into a temporary sibling of the output, `_metrics.json` goes in beside
them, and the sibling is renamed onto the output (an earlier run's output is moved aside first and
deleted after). Parquet readers (Spark, pyarrow, pandas) skip `_`-prefixed files, so the metrics
file travels with the predictions without being read as data. Every file operation goes through
Hadoop's FileSystem, so any URL Spark writes works.
"""

from __future__ import annotations

import json
from typing import Any

from sparkml_par.contract import SCORE_METRICS
from sparkml_par.errors import SparkmlParError
from sparkml_par.io.hadoop import HadoopFs, clear_leftovers, qualify_url, replace_directory


def output_url(output: str) -> str:
    return qualify_url(output)


def check_output(spark, url: str) -> None:
    """Refuses to replace anything but an earlier run's predictions (recognised by their metrics file)."""
    clear_leftovers(spark, url)
    if HadoopFs(spark, url).exists(url) and not published(spark, url):
        raise SparkmlParError(
            f"score.output {url!r} already exists and holds no predictions (no {SCORE_METRICS}); "
            f"choose another score.output or remove it"
        )


def published(spark, url: str) -> bool:
    """Predictions are at url, complete: their metrics file is renamed into place with them."""
    return HadoopFs(spark, url).exists(f"{url}/{SCORE_METRICS}")


def write_metrics_file(spark, staging: str, payload: dict[str, Any]) -> None:
    HadoopFs(spark, staging).write_text(f"{staging}/{SCORE_METRICS}", json.dumps(payload, indent=2) + "\n")


def publish(spark, staging: str, url: str) -> None:
    """Renames the finished staging directory onto the output, replacing an earlier run's predictions."""
    replace_directory(spark, staging, url, "predictions")


def discard(spark, staging: str) -> None:
    fs = HadoopFs(spark, staging)
    if fs.exists(staging):
        fs.delete(staging)
