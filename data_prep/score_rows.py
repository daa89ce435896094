"""Raw rows to be scored, through prepare's own reader, checks and feature pipeline.

The rules come from the dataset the model was trained on (its manifest keeps the data config as it was
validated), not from the scoring config: what prepare imputes is imputed here by the same fitted
pipeline, and what prepare quarantines is rejected here with the same reason, so one row gets the same
treatment in both. A CSV, JSON lines, Parquet or image input is read by the reader prepare used.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from data_prep import featurize
from data_prep.ingest import Ingested, from_dataframe, ingest, reading_raw_rows
from data_prep.manifest import read_manifest
from data_prep.validate import validate_for_scoring
from sparkml_par.config import DataConfig, data_config_from_dict
from sparkml_par.contract import MANIFEST, MANIFEST_CLASSES, MANIFEST_DATA_CONFIG, MANIFEST_FEATURE_PIPELINE
from sparkml_par.errors import SparkmlParError
from sparkml_par.io.hadoop import qualify_url

log = logging.getLogger(__name__)


@dataclass
class ScoringRows:
    """Rows ready for the model, and the rows the dataset's checks reject, counted by reason."""

    rows: Any  # the row id, `features`, and every raw column that is not a feature (ids, the label)
    rejected: Any  # rejected rows as the input had them, with _reject_reason
    rows_in: int
    reasons: dict[str, int]


def dataset_manifest(spark, dataset_url: str) -> dict[str, Any]:
    manifest = read_manifest(spark, dataset_url)
    if manifest is None:
        raise SparkmlParError(
            f"{dataset_url!r} is not a dataset (no {MANIFEST}); the model's dataset is needed to "
            f"read raw rows the way they were prepared: keep the data.output it was trained on"
        )
    if MANIFEST_DATA_CONFIG not in manifest:
        raise SparkmlParError(
            f"dataset {dataset_url!r} was prepared by an older version that did not record its "
            f"validation rules; run `sparkml-par prepare` and `sparkml-par train` again to score "
            f"raw rows with it (prepared rows with a `features` column score as they are)"
        )
    return manifest


def rules(manifest: dict[str, Any]) -> DataConfig:
    """The data config the dataset was prepared with, its feature columns as validated."""
    return data_config_from_dict(manifest[MANIFEST_DATA_CONFIG])


def read_raw(spark, path: str, source: str, manifest: dict[str, Any]) -> Ingested:
    """Rows at path read as prepare read its input: the same CSV options, image size and classes."""
    cfg = dataclasses.replace(rules(manifest), path=path, source=source)
    return ingest(spark, cfg, classes=manifest.get(MANIFEST_CLASSES) if source == "images" else None)


def score_rows(spark, ing: Ingested, manifest: dict[str, Any], dataset_url: str) -> ScoringRows:
    """Validates raw rows by the dataset's rules and builds their features with its fitted pipeline."""
    cfg = rules(manifest)
    with reading_raw_rows(spark):  # the reason counts are collected here
        v = validate_for_scoring(ing, cfg, cfg.features)
    if v.reasons:
        log.warning(
            "%d of %d rows to score fail the dataset's checks (%s); they are not scored",
            v.rows_in - v.rows_clean,
            v.rows_in,
            ", ".join(f"{reason}: {n}" for reason, n in v.reasons.items()),
        )
    return ScoringRows(
        rows=featurize.apply_fitted(
            v.clean, manifest.get(MANIFEST_FEATURE_PIPELINE), cfg.features, qualify_url(dataset_url)
        ),
        rejected=v.rejected,
        rows_in=v.rows_in,
        reasons=v.reasons,
    )


def apply_feature_pipeline(spark_df, dataset_path: str):
    """The dataset's `features` column for a raw DataFrame, built exactly as prepare built it; rows that
    prepare would have quarantined are left out (and counted in the log)."""
    spark = spark_df.sparkSession
    manifest = dataset_manifest(spark, dataset_path)
    return score_rows(spark, from_dataframe(spark_df), manifest, dataset_path).rows
