"""What can be scored, turned into rows of (id, features[, label]) the model accepts, or refused clearly.

An input is a DataFrame or a path. A path is a dataset directory (its `_manifest.json` is there: the
test split is scored), one split of a dataset, a Parquet directory, or raw CSV, JSON lines or image
files. Rows that already have a `features` column are taken as prepared; raw rows are read, checked
and featurized by the rules of the model's dataset (data_prep.score_rows), and the rows those checks
reject are set apart with their reason. Every check that the schema allows is made on the driver,
before any row is scored; the per-row check (array length, nulls) fails the Spark job with the row's id.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from typing import Any

from sparkml_par.contract import FEATURES, MANIFEST_SPLITS, column
from sparkml_par.errors import SparkmlParError
from sparkml_par.infer.predictor import input_size

DEFAULT_SPLIT = "test"
_EXTENSION_FORMATS = {
    "csv": "csv",
    "tsv": "csv",
    "json": "json",
    "jsonl": "json",
    "ndjson": "json",
    "parquet": "parquet",
}
# The Spark error of a failed per-row check carries this prefix, so the driver can find the message.
ROW_CHECK_PREFIX = "score input: "


@dataclass
class ScoringInput:
    """Rows with a `features` column, and for raw input the rows the dataset's checks rejected."""

    rows: Any
    raw: bool  # read and featurized here (False: the rows came prepared)
    rejected: Any = None
    rows_in: int | None = None
    reasons: dict[str, int] = field(default_factory=dict)


def scoring_input(spark, df_or_path, description: dict[str, Any], source: str | None = None) -> ScoringInput:
    """The rows of a DataFrame or a path, featurized the way the model's dataset was when they are raw.

    A path is a dataset directory (its test split is scored), one split, a Parquet directory, or raw files
    in any format prepare reads (`source`, or told by their extensions).
    """
    from data_prep.ingest import from_dataframe
    from data_prep.manifest import read_manifest
    from data_prep.score_rows import dataset_manifest, read_raw
    from sparkml_par.io.hadoop import HadoopFs, qualify_url

    if not isinstance(df_or_path, (str, os.PathLike)):
        if FEATURES in df_or_path.columns:
            return ScoringInput(rows=df_or_path, raw=False)
        _require_raw_columns(df_or_path.columns, description)
        return _featurized(
            spark, from_dataframe(df_or_path), dataset_manifest(spark, description["dataset"]), description["dataset"]
        )
    path = os.fspath(df_or_path)
    url = qualify_url(path)
    fs = HadoopFs(spark, url)
    if not fs.exists(url):
        raise SparkmlParError(
            f"score.input {path!r} does not exist; point score.input at a dataset directory "
            f"(data.output of sparkml-par prepare), one of its splits, a Parquet directory, or raw "
            f"CSV, JSON lines or image files"
        )
    manifest = read_manifest(spark, url)
    if manifest is not None:
        split = manifest[MANIFEST_SPLITS].get(DEFAULT_SPLIT)
        if split is None:
            raise SparkmlParError(
                f"dataset {path!r} has no {DEFAULT_SPLIT!r} split (its splits are "
                f"{', '.join(manifest[MANIFEST_SPLITS])}); set score.input to {path}/<split>"
            )
        return ScoringInput(rows=_read_parquet(spark, f"{url}/{split['path']}", path), raw=False)
    source = source or _source_of_files(fs, url, path)
    if source == "parquet":
        rows = _read_parquet(spark, url, path)
        if FEATURES in rows.columns:
            return ScoringInput(rows=rows, raw=False)
        _require_raw_columns(rows.columns, description)
    dataset = dataset_manifest(spark, description["dataset"])
    return _featurized(spark, read_raw(spark, url, source, dataset), dataset, description["dataset"])


def _featurized(spark, ing, manifest: dict[str, Any], dataset_url: str) -> ScoringInput:
    """Raw rows checked and featurized by the rules of the dataset whose manifest this is."""
    from data_prep.score_rows import score_rows

    scored = score_rows(spark, ing, manifest, dataset_url)
    return ScoringInput(
        rows=scored.rows, raw=True, rejected=scored.rejected, rows_in=scored.rows_in, reasons=scored.reasons
    )


def _read_parquet(spark, url: str, path: str):
    try:
        return spark.read.parquet(url)
    except Exception as exc:  # Spark's AnalysisException: not Parquet, or an empty directory
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SparkmlParError(
            f"score.input {path!r} cannot be read as Parquet ({first_line}); point it at a "
            f"dataset, a split or a Parquet directory, set score.source for raw CSV, JSON lines or "
            f"images, or pass a DataFrame to score()"
        ) from None


def _source_of_files(fs, url: str, path: str) -> str:
    """The format of raw files, from their extensions: one format per input."""
    from data_prep.ingest import IMAGE_EXTENSIONS

    formats = set()
    for name, _, _ in fs.list_files(url):
        extension = name.rsplit("/", 1)[-1].rpartition(".")[2].lower()
        formats.add(_EXTENSION_FORMATS.get(extension, "images" if extension in IMAGE_EXTENSIONS else "parquet"))
    if len(formats) != 1:
        found = ", ".join(sorted(formats)) or "no files"
        raise SparkmlParError(
            f"score.input {path!r}: cannot tell its format from the file names ({found}); set "
            f"score.source to csv, json, parquet or images"
        )
    return formats.pop()


def _require_raw_columns(columns: list[str], description: dict[str, Any]) -> None:
    raw = description.get("raw_feature_columns") or []
    missing = [name for name in raw if name not in columns]
    if missing or not raw:
        raise SparkmlParError(
            f"scoring input: {_describe_missing(missing or [FEATURES], columns)}; the model reads a prepared "
            f"{FEATURES!r} column or the raw columns {raw!r} it was prepared from (the input's columns are "
            f"{', '.join(map(repr, columns))})"
        )


def checked_features(df, description: dict[str, Any], id_column: str):
    """The `features` column as array<float>, failing the scoring job at the first row whose length differs
    from the model's input.

    No Spark job runs here: the predictions stay lazy, and a user's DataFrame (a join, an aggregate) is
    computed once, by the scoring job, not once more for a look at its first row. `width_mismatch` tells
    a whole input of the wrong width from one bad row after such a job failed.
    """
    from pyspark.sql import functions as F

    size = input_size(description)
    features = _features_as_floats(df, description)
    message = F.format_string(
        f"{ROW_CHECK_PREFIX}row with {id_column}=%s has %s {FEATURES} values but the model expects {size} "
        f"(input shape {description['spec']['input_shape']}); fix or remove that row, or score data prepared "
        f"like the model's dataset {description.get('dataset')!r}",
        column(id_column).cast("string"),
        F.coalesce(F.size(features).cast("string"), F.lit("null")),
    )
    return F.when(F.size(features) == size, features).otherwise(F.raise_error(message))


def width_mismatch(df, description: dict[str, Any]) -> SparkmlParError | None:
    """The error for an input whose first row already has another length than the model's input: the data
    was prepared for another model, not one bad row. A Spark job: for the failure path only."""
    from pyspark.sql import functions as F

    size = input_size(description)
    first = df.select(F.size(_features_as_floats(df, description)).alias("n")).where(F.col("n") >= 0).limit(1).collect()
    if not first or first[0]["n"] == size:
        return None
    return SparkmlParError(
        f"scoring input: {FEATURES!r} arrays have {first[0]['n']} values, but the model expects {size} "
        f"(input shape {description['spec']['input_shape']}); score data prepared like the model's dataset "
        f"{description.get('dataset')!r}"
    )


def _features_as_floats(df, description: dict[str, Any]):
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, NumericType

    dtype = df.schema[FEATURES].dataType
    if isinstance(dtype, VectorUDT):
        from pyspark.ml.functions import vector_to_array

        return vector_to_array(F.col(FEATURES), "float32")
    if isinstance(dtype, ArrayType) and isinstance(dtype.elementType, NumericType):
        return F.col(FEATURES).cast("array<float>")
    raise SparkmlParError(
        f"scoring input: column {FEATURES!r} has type {dtype.simpleString()}, but the model reads an array of "
        f"{input_size(description)} numbers (array<float>) or an ML vector; pass the prepared dataset, or the raw "
        f"columns {description.get('raw_feature_columns')!r} without a {FEATURES!r} column so the feature pipeline "
        f"builds it"
    )


def require_id_column(df, id_column: str) -> None:
    if id_column not in df.columns:
        raise SparkmlParError(
            f"score.id_column: {_describe_missing([id_column], df.columns)}; set score.id_column "
            f"to a column that identifies rows (the input's columns are "
            f"{', '.join(map(repr, df.columns))})"
        )


def label_column(df, description: dict[str, Any]) -> str | None:
    """The model's label column when the input has it (then predictions can be evaluated)."""
    name = description.get("label_column")
    return name if name and name in df.columns else None


def _describe_missing(names: list[str], columns: list[str]) -> str:
    parts = []
    for name in names:
        close = difflib.get_close_matches(name, columns, n=1, cutoff=0.6)
        parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return f"column{'s' if len(names) > 1 else ''} {', '.join(parts)} missing"


def user_error_in(exc: BaseException) -> SparkmlParError | None:
    """The per-row check's message inside a failed Spark job's error, as a SparkmlParError."""
    text = str(exc)
    start = text.find(ROW_CHECK_PREFIX)
    if start < 0:
        return None
    line = text[start + len(ROW_CHECK_PREFIX) :].splitlines()[0]
    return SparkmlParError(f"scoring input: {line.split(' SQLSTATE')[0].rstrip('. ')}")
