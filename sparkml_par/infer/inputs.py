"""What can be scored, turned into rows of (id, features[, label]) the model accepts, or refused clearly.

An input is a DataFrame or a path. A path is a dataset directory (its `_manifest.json` is there: the
test split is scored), one split of a dataset, or any Parquet directory. Rows that already have a
`features` column are taken as prepared; raw rows go through the feature pipeline the model's
dataset was prepared with. Every check that the schema allows is made on the driver, before any
row is scored; the per-row check (array length, nulls) fails the Spark job with the row's id.
"""

from __future__ import annotations

import difflib
from typing import Any

from sparkml_par.errors import SparkmlParError
from sparkml_par.infer.predictor import input_size

FEATURES = "features"
DEFAULT_SPLIT = "test"
# The Spark error of a failed per-row check carries this prefix, so the driver can find the message.
ROW_CHECK_PREFIX = "score input: "


def read_input(spark, path: str):
    """The rows at `path`: a dataset's test split, a split, or a Parquet directory."""
    from data_prep.manifest import HadoopFs, qualify_url, read_manifest

    url = qualify_url(path)
    if not HadoopFs(spark, url).exists(url):
        raise SparkmlParError(f"score.input {path!r} does not exist; point score.input at a dataset directory "
                              f"(data.output of sparkml-par prepare), one of its splits, or a Parquet directory")
    manifest = read_manifest(spark, url)
    if manifest is not None:
        split = manifest["splits"].get(DEFAULT_SPLIT)
        if split is None:
            raise SparkmlParError(f"dataset {path!r} has no {DEFAULT_SPLIT!r} split (its splits are "
                                  f"{', '.join(manifest['splits'])}); set score.input to {path}/<split>")
        url = f"{url}/{split['path']}"
    try:
        return spark.read.parquet(url)
    except Exception as exc:  # Spark's AnalysisException: not Parquet, or an empty directory
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SparkmlParError(f"score.input {path!r} cannot be read as Parquet ({first_line}); point it at a "
                              f"dataset, a split or a Parquet directory, or pass a DataFrame to score()") from None


def with_features(df, description: dict[str, Any]):
    """`df` with a `features` column: kept when present, else built by the dataset's feature pipeline."""
    if FEATURES in df.columns:
        return df
    raw = description.get("raw_feature_columns") or []
    missing = [name for name in raw if name not in df.columns]
    if missing or not raw:
        raise SparkmlParError(
            f"scoring input: {_describe_missing(missing or [FEATURES], df.columns)}; the model reads a prepared "
            f"{FEATURES!r} column or the raw columns {raw!r} it was prepared from (the input's columns are "
            f"{', '.join(map(repr, df.columns))})")
    from data_prep.featurize import apply_feature_pipeline

    return apply_feature_pipeline(df, description["dataset"])


def checked_features(df, description: dict[str, Any], id_column: str):
    """The `features` column as array<float>, failing any row whose length differs from the model's input."""
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, NumericType

    size = input_size(description)
    dtype = df.schema[FEATURES].dataType
    if isinstance(dtype, VectorUDT):
        from pyspark.ml.functions import vector_to_array

        column = vector_to_array(F.col(FEATURES), "float32")
    elif isinstance(dtype, ArrayType) and isinstance(dtype.elementType, NumericType):
        column = F.col(FEATURES).cast("array<float>")
    else:
        raise SparkmlParError(
            f"scoring input: column {FEATURES!r} has type {dtype.simpleString()}, but the model reads an array of "
            f"{size} numbers (array<float>) or an ML vector; pass the prepared dataset, or the raw columns "
            f"{description.get('raw_feature_columns')!r} without a {FEATURES!r} column so the feature pipeline "
            f"builds it")
    first = df.select(F.size(column).alias("n")).where(F.col("n") >= 0).limit(1).collect()
    if first and first[0]["n"] != size:
        raise SparkmlParError(
            f"scoring input: {FEATURES!r} arrays have {first[0]['n']} values, but the model expects {size} "
            f"(input shape {description['spec']['input_shape']}); score data prepared like the model's dataset "
            f"{description.get('dataset')!r}")
    message = F.format_string(
        f"{ROW_CHECK_PREFIX}row with {id_column}=%s has %s {FEATURES} values but the model expects {size}; "
        f"fix or remove that row", F.col(f"`{id_column}`").cast("string"),
        F.coalesce(F.size(column).cast("string"), F.lit("null")))
    return F.when(F.size(column) == size, column).otherwise(F.raise_error(message))


def require_id_column(df, id_column: str) -> None:
    if id_column not in df.columns:
        raise SparkmlParError(f"score.id_column: {_describe_missing([id_column], df.columns)}; set score.id_column "
                              f"to a column that identifies rows (the input's columns are "
                              f"{', '.join(map(repr, df.columns))})")


def label_column(df, description: dict[str, Any]) -> str | None:
    """The model's label column when the input has it as numbers (then predictions can be evaluated)."""
    from pyspark.sql.types import NumericType

    name = description.get("label_column")
    if not name or name not in df.columns:
        return None
    if not isinstance(df.schema[name].dataType, NumericType):
        raise SparkmlParError(
            f"scoring input: label column {name!r} has type {df.schema[name].dataType.simpleString()}, but the "
            f"model was trained on numeric labels; drop or rename the column to score without evaluation, or "
            f"map it to the training labels")
    return name


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
    line = text[start + len(ROW_CHECK_PREFIX):].splitlines()[0]
    return SparkmlParError(f"scoring input: {line.split(' SQLSTATE')[0].rstrip('. ')}")
