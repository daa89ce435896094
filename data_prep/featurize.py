"""The Spark ML feature pipeline: built from statistics of the train split only, kept as numbers, reused by scoring.

Tabular inputs go through a copy of the columns under plain names (and date parts) -> imputer -> string
indexer (the kept categories; the rest, and unseen ones, are <other>) -> one-hot -> vector assembler ->
standard scaler (each as configured); the result becomes the `features` column as a float32 array. Inputs
that arrive as one numeric vector (digits, images, synthetic) need no pipeline and pass through unchanged.
The pipeline is fitted as numbers (the recipe) that the dataset's manifest keeps: prepare's write tasks
compute the features from them on Arrow batches (`BatchFeatures`), and scoring builds the Spark ML
PipelineModel of the same numbers, which gives the same float32 values, with no saved model to read.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from data_prep.profile import ColumnStatistics
from sparkml_par.config import ColumnSpec, FeaturizeConfig
from sparkml_par.contract import FEATURES, column, quoted
from sparkml_par.errors import SparkmlParError

log = logging.getLogger(__name__)

_VECTOR = "_features_vector"
_SCALED = "_features_scaled"
# The numbers a timestamp or date feature becomes, as Spark SQL functions of it (in the session's time zone).
DATETIME_PARTS = {
    "timestamp": ("year", "month", "dayofmonth", "dayofweek", "hour"),
    "date": ("year", "month", "dayofmonth", "dayofweek"),
}
NUMERIC_TYPES = ("float", "int", "bool")
# What a category outside the kept ones becomes (and an unseen one at scoring).
OTHER_CATEGORY = "<other>"
_PLAIN_PREFIX = "_sparkml_par_feature"


def needs_pipeline(specs: list[ColumnSpec]) -> bool:
    return not (len(specs) == 1 and specs[0].type == "vector")


def plain_names(names: list[str]) -> dict[str, str]:
    """Each feature column's name inside the pipeline. Spark ML's stages take plain names (a dot reads as a
    struct field), so the pipeline's first stage copies the user's columns to these, whatever they are called."""
    return {name: f"{_PLAIN_PREFIX}{i}" for i, name in enumerate(names)}


@dataclass
class FittedPipeline:
    """The fitted feature pipeline as numbers (the recipe: `build_pipeline` makes the Spark ML pipeline of it,
    `BatchFeatures` computes its features from Arrow batches; the manifest keeps it), and per text feature its
    distinct values in train and how many it keeps."""

    recipe: dict[str, Any]
    categories: dict[str, dict[str, int]]


def fit_feature_pipeline(
    train_df,
    specs: list[ColumnSpec],
    cfg: FeaturizeConfig,
    statistics: ColumnStatistics,
) -> FittedPipeline:
    """Builds the configured stages from statistics of the train split (never of validation or test rows).

    Fitting stage by stage reads the train rows once per estimator; here the caller's statistics give what
    the stages need (`profile.column_statistics` of `number_inputs`, with the counts): each number input's
    count, mean, variance and median over the train rows, and each text column's values in train with their
    rows (`categories`). From them comes the recipe: each number's fill, each text column's kept categories,
    the scaler's mean and standard deviation per assembled feature (from the moments of each column and
    category, with the gaps filled).
    """
    from pyspark.sql.types import IntegralType

    vectors = [s.name for s in specs if s.type == "vector"]
    if vectors:
        raise SparkmlParError(
            f"data.features: vector column(s) {vectors} cannot be mixed with other feature columns; "
            f"declare one vector column alone, or only scalar (float, int, bool, string, timestamp, date) columns"
        )
    if statistics.train_rows == 0:
        raise SparkmlParError(
            "data.split: the train split has no clean rows to fit the feature pipeline on; raise data.split.train"
        )
    rows = statistics.train_rows
    integral = {f.name for f in train_df.schema.fields if isinstance(f.dataType, IntegralType)}
    numbers_in = [{"column": name, **({"part": part} if part else {})} for name, part in number_inputs(specs)]
    strings = [s.name for s in specs if s.type == "string"]
    moments = []
    for entry in numbers_in:
        values, mean, variance, median = statistics.train[(entry["column"], entry.get("part"))]
        fill = median if cfg.impute == "median" else mean if cfg.impute == "mean" else None
        if fill is not None and "part" not in entry and entry["column"] in integral:
            fill = int(fill)  # Spark's imputer fills an integer column with its statistic cast to the column's type
        if cfg.impute != "none" and fill is None:
            raise SparkmlParError(
                f"data.features {entry['column']!r}: every value is missing in the train split, so there is no "
                f"{cfg.impute} to impute; leave the column out of data.features or fill it in the input"
            )
        entry["fill"] = None if cfg.impute == "none" else float(fill)
        moments.append(_filled_moments(rows, values, mean, variance, entry["fill"]))
    kept_categories, categories = {}, {}
    for name in strings:
        # Most frequent first, ties in text order, as Spark's StringIndexer orders them; as StringIndexer,
        # no category for a missing value.
        counted = statistics.categories.get(name, [])
        labels = sorted(((value, n) for value, n in counted if value is not None), key=_by_rows)
        kept = labels[: cfg.max_categories] if cfg.max_categories else labels
        kept_categories[name] = [label for label, _ in kept]
        categories[name] = {"distinct": len(labels), "kept": len(kept)}
        counts = [n for _, n in kept] + [rows - sum(n for _, n in kept)]  # the last: <other>, unseen
        moments += _one_hot_moments(rows, counts) if cfg.one_hot else [_index_moments(rows, counts)]
    _warn_cut(categories, cfg.max_categories)
    recipe = {
        "impute": cfg.impute,
        "numbers": numbers_in,
        "categories": kept_categories,
        "one_hot": cfg.one_hot,
        "scale": {"mean": [m for m, _ in moments], "std": [math.sqrt(v) for _, v in moments]} if cfg.scale else None,
    }
    return FittedPipeline(recipe, categories)


def build_pipeline(df, specs: list[ColumnSpec], recipe: dict[str, Any]):
    """The PipelineModel of a recipe (`fit_feature_pipeline`'s): copy to plain names (and date parts) ->
    imputer -> string indexers -> one-hot encoder -> vector assembler -> standard scaler, each as the recipe
    says, made from its numbers: only the imputer's fit on one row of them runs a Spark job. `df` holds the
    raw feature columns; the one-hot encoder reads the category counts from its plan's column metadata, not
    from its rows."""
    from pyspark.ml import PipelineModel
    from pyspark.ml.feature import OneHotEncoder, StringIndexerModel, VectorAssembler

    spark = df.sparkSession
    plain = plain_names([s.name for s in specs])
    copy = _copy_stage(specs, plain)
    stages: list[Any] = [copy]
    numeric = [_number_column(n, plain) for n in recipe["numbers"]]
    assembled = numeric
    if numeric and recipe["impute"] != "none":
        assembled = [f"{n}__imputed" for n in numeric]
        stages.append(_imputer(spark, numeric, assembled, [n["fill"] for n in recipe["numbers"]], recipe["impute"]))
    strings = [plain[s.name] for s in specs if s.type == "string"]
    if strings:
        labels = [recipe["categories"][s.name] for s in specs if s.type == "string"]
        indexed = [f"{s}__index" for s in strings]
        # A category outside the kept ones (rarer, or unseen in training or at scoring time) takes the index
        # after them, <other>. One indexer per column: pyspark passes the labels of several as one
        # rectangular array, padding the shorter lists with nulls.
        indexers = [
            StringIndexerModel.from_labels(kept, inputCol=name, outputCol=index, handleInvalid="keep")
            for kept, name, index in zip(labels, strings, indexed)
        ]
        stages += indexers
        if recipe["one_hot"]:
            encoded = [f"{s}__onehot" for s in strings]
            encoder = OneHotEncoder(inputCols=indexed, outputCols=encoded, handleInvalid="error", dropLast=False)
            stages.append(encoder.fit(PipelineModel(stages=[copy, *indexers]).transform(df)))
            assembled = assembled + encoded
        else:
            assembled = assembled + indexed
    stages.append(VectorAssembler(inputCols=assembled, outputCol=_VECTOR))
    if recipe["scale"] is not None:
        stages.append(_scaler(spark, recipe["scale"]["mean"], recipe["scale"]["std"]))
    return PipelineModel(stages=stages)


def _copy_stage(specs: list[ColumnSpec], plain: dict[str, str]):
    """The first stage: the feature columns copied to plain names, a timestamp or date as its parts."""
    from pyspark.ml.feature import SQLTransformer

    return SQLTransformer(statement=f"SELECT *, {', '.join(_plain_inputs(specs, plain))} FROM __THIS__")


def _plain_inputs(specs: list[ColumnSpec], plain: dict[str, str]) -> list[str]:
    """The SQL of the pipeline's inputs under their plain names: each feature column, a timestamp's or
    date's parts as doubles."""
    copies, parts = [], []
    for s in specs:
        if s.type in DATETIME_PARTS:
            parts += [(f"{part}({quoted(s.name)})", f"{plain[s.name]}__{part}") for part in DATETIME_PARTS[s.type]]
        else:
            copies.append(f"{quoted(s.name)} AS {plain[s.name]}")
    return copies + [f"CAST({value} AS DOUBLE) AS {name}" for value, name in parts]


class BatchFeatures:
    """The recipe's features computed from Arrow tables of its inputs, in the tasks that write the split
    files: what the Spark ML stages of `build_pipeline` compute (fill, index, one-hot, assemble, scale, as
    float32), without building Spark ML vectors and converting them to arrays, and with only the inputs,
    not every one-hot slot, crossing from the JVM into Python. Scoring applies the Spark ML pipeline of the
    same recipe; the tests hold the two equal."""

    def __init__(self, specs: list[ColumnSpec], recipe: dict[str, Any]):
        plain = plain_names([s.name for s in specs])
        self.inputs = _plain_inputs(specs, plain)
        self.numbers = [(_number_column(n, plain), n["fill"]) for n in recipe["numbers"]]
        self.strings = [(plain[s.name], recipe["categories"][s.name]) for s in specs if s.type == "string"]
        self.one_hot = recipe["one_hot"]
        self.size = len(self.numbers) + sum(len(kept) + 1 if self.one_hot else 1 for _, kept in self.strings)
        scale = recipe["scale"]
        self.mean = None if scale is None else scale["mean"]
        # Spark's scaler multiplies by 1 / std, and gives 0.0 for a feature whose standard deviation is 0.
        self.factor = None if scale is None else [1.0 / std if std else 0.0 for std in scale["std"]]

    def schema(self, schema):
        """The Spark schema of the rows this makes from rows of `schema` (the inputs' columns replaced by
        `features`, where the first of them was)."""
        from pyspark.sql.types import ArrayType, FloatType, StructField, StructType

        inputs = self._input_names()
        first = min(i for i, f in enumerate(schema.fields) if f.name in inputs)
        feature = StructField(FEATURES, ArrayType(FloatType(), containsNull=False), nullable=False)
        kept = [f for f in schema.fields if f.name not in inputs]
        return StructType(kept[:first] + [feature] + kept[first:])

    def __call__(self, table):
        """The rows of an Arrow table of the inputs (and other columns), with `features` in their place."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        rows = table.num_rows
        x = np.zeros((rows, self.size))
        for j, (name, fill) in enumerate(self.numbers):
            values = table[name] if fill is None else pc.fill_null(table[name], fill)
            x[:, j] = values.to_numpy()
        j = len(self.numbers)
        for name, kept in self.strings:
            values = table[name]
            index = pc.fill_null(pc.index_in(values, value_set=pa.array(kept, values.type)), len(kept)).to_numpy()
            if self.one_hot:
                x[np.arange(rows), j + index] = 1.0
                j += len(kept) + 1
            else:
                x[:, j] = index
                j += 1
        if self.mean is not None:
            x -= np.asarray(self.mean)
            x *= np.asarray(self.factor)
        element = pa.field("element", pa.float32(), nullable=False)
        offsets = pa.array(np.arange(0, (rows + 1) * self.size, self.size, dtype=np.int32))
        features = pa.ListArray.from_arrays(offsets, pa.array(x.astype(np.float32).ravel()), type=pa.list_(element))
        inputs = self._input_names()
        first = min(i for i, name in enumerate(table.column_names) if name in inputs)
        kept = table.drop_columns(sorted(inputs))
        return kept.add_column(first, pa.field(FEATURES, features.type, nullable=False), features)

    def _input_names(self) -> set[str]:
        return {name for name, _ in self.numbers} | {name for name, _ in self.strings}


def number_inputs(specs: list[ColumnSpec]) -> list[tuple[str, str | None]]:
    """The pipeline's number inputs in order, as (column, part): the number columns (part None), then each
    timestamp's or date's parts."""
    numbers = [(s.name, None) for s in specs if s.type in NUMERIC_TYPES]
    return numbers + [(s.name, part) for s in specs if s.type in DATETIME_PARTS for part in DATETIME_PARTS[s.type]]


def _number_column(entry: dict[str, Any], plain: dict[str, str]) -> str:
    """A number input's column inside the pipeline."""
    name = plain[entry["column"]]
    return f"{name}__{entry['part']}" if "part" in entry else name


# Spark ML's scaler model, made from its values through its (package-private) constructor, the same from Spark
# 3.5 to 4.3: pyspark makes it only by fitting, a Spark job over rows that hold those values.
_JAVA_SCALER = "org.apache.spark.ml.feature.StandardScalerModel"


def _by_rows(category: tuple[str, int]) -> tuple[int, str]:
    return -category[1], category[0]


def _imputer(spark, numeric: list[str], imputed: list[str], fills: list[float], strategy: str):
    """Spark ML's imputer of these fills, fitted on one row of them: as that row's mean, which is the row,
    then given the configured strategy, which the model records. (Its constructor differs between Spark
    versions; fitting does not.)"""
    from pyspark.ml.feature import Imputer
    from pyspark.sql.types import DoubleType, StructField, StructType

    row = spark.createDataFrame(
        [tuple(float(fill) for fill in fills)], StructType([StructField(n, DoubleType()) for n in numeric])
    )
    model = Imputer(inputCols=numeric, outputCols=imputed, strategy="mean").fit(row)
    model.set(model.strategy, strategy)  # recorded with the model: how its gaps are filled
    return model


def _filled_moments(rows: int, values: int, mean, variance, fill) -> tuple[float, float]:
    """(mean, sample variance) of a column over all `rows` once its missing values hold `fill` (none are
    missing without imputation): the values' moments combined with those of the filled gap."""
    mean = float(mean or 0.0)
    m2 = float(variance or 0.0) * max(values - 1, 0)
    gap = rows - values
    if gap and fill is not None:
        m2 += (float(fill) - mean) ** 2 * values * gap / rows
        mean = (values * mean + gap * float(fill)) / rows
    return mean, m2 / (rows - 1) if rows > 1 else 0.0


def _one_hot_moments(rows: int, counts: list[int]) -> list[tuple[float, float]]:
    """(mean, sample variance) of each one-hot slot whose category holds counts[j] of `rows` rows."""
    return [(c / rows, (c - c * c / rows) / (rows - 1) if rows > 1 else 0.0) for c in counts]


def _index_moments(rows: int, counts: list[int]) -> tuple[float, float]:
    """(mean, sample variance) of a category index j that counts[j] rows hold."""
    mean = sum(j * c for j, c in enumerate(counts)) / rows
    m2 = sum(c * (j - mean) ** 2 for j, c in enumerate(counts))
    return mean, m2 / (rows - 1) if rows > 1 else 0.0


def _scaler(spark, mean: list[float], std: list[float]):
    """The standard scaler of this mean and standard deviation per assembled feature: Spark ML's model made
    from them, as its fit makes it from the same moments, with no Spark job."""
    from pyspark.ml.feature import StandardScalerModel

    def vector(values: list[float]):
        gateway = spark.sparkContext._gateway
        array = gateway.new_array(gateway.jvm.double, len(values))
        for i, value in enumerate(values):
            array[i] = value
        return gateway.jvm.org.apache.spark.ml.linalg.Vectors.dense(array)

    model = StandardScalerModel._create_from_java_class(_JAVA_SCALER, _uid(spark, "stdScal"), vector(std), vector(mean))
    model.setInputCol(_VECTOR).setOutputCol(_SCALED)
    model.set(model.withMean, True)
    model.set(model.withStd, True)
    return model


def _uid(spark, prefix: str) -> str:
    return spark.sparkContext._jvm.org.apache.spark.ml.util.Identifiable.randomUID(prefix)


def _warn_cut(categories: dict[str, dict[str, int]], max_categories: int) -> None:
    for name, counted in categories.items():
        if counted["kept"] < counted["distinct"]:
            log.warning(
                "data.features %r: %d distinct values in train, the %d most frequent kept as categories and the "
                "other %d read as %s (featurize.max_categories=%d; 0 keeps all)",
                name,
                counted["distinct"],
                counted["kept"],
                counted["distinct"] - counted["kept"],
                OTHER_CATEGORY,
                max_categories,
            )


def transform(model, df):
    """Applies a fitted pipeline and leaves `features` as a float32 array, dropping the helper columns; and
    the length of the features, which Spark's VectorAssembler (and the scaler after it) record in the
    vector column's ML attributes while planning, so no job counts it."""
    from pyspark.ml.functions import vector_to_array

    out = model.transform(df)
    vector = _SCALED if _SCALED in out.columns else _VECTOR
    size = out.schema[vector].metadata["ml_attr"]["num_attrs"]
    added = [c for c in out.columns if c not in df.columns]
    return out.withColumn(FEATURES, vector_to_array(vector, "float32")).drop(*added), size


def apply_fitted(df, pipeline: dict | str | None, specs: list[ColumnSpec], dataset_url: str | None = None):
    """`df` (validated, typed rows) with the `features` column: through the pipeline of the dataset's recipe
    (the manifest's `feature_pipeline`), or, for an input that is one numeric vector (None), that vector as
    float32. A dataset prepared before the recipe was recorded names its saved pipeline's directory instead."""
    from pyspark.ml import PipelineModel

    if pipeline is None:
        (spec,) = specs
        return df.withColumn(FEATURES, column(spec.name).cast("array<float>"))
    if isinstance(pipeline, str):
        return transform(PipelineModel.load(f"{dataset_url}/{pipeline}"), df)[0]
    return transform(build_pipeline(df, specs, pipeline), df)[0]


def export_fitted(pipeline: dict | str | None, raw_types: dict[str, str]) -> dict | None:
    """The feature pipeline as plain numbers, to apply without Spark (the MLflow model of an artifact): the
    assembled columns in order, each one's imputation value, the scaler's mean and standard deviation.

    None when the pipeline reads more than numbers (text, bool words, dates), or is a saved Spark ML
    pipeline of a dataset prepared before the recipe was recorded: the MLflow model then is not logged.
    """
    if pipeline is None:
        (name,) = raw_types
        return {"vector": name}
    if isinstance(pipeline, str) or any(kind not in ("float", "int") for kind in raw_types.values()):
        return None
    numbers, scale = pipeline["numbers"], pipeline["scale"]
    return {
        "columns": [n["column"] for n in numbers],
        "impute": {n["column"]: n["fill"] for n in numbers if n["fill"] is not None},
        "mean": scale["mean"] if scale else None,
        "std": scale["std"] if scale else None,
    }


def apply_exported(exported: dict, frame):
    """`export_fitted`'s pipeline applied to a pandas DataFrame of raw feature columns: float32 features."""
    import numpy as np

    if "vector" in exported:
        return np.stack([np.asarray(v, dtype=np.float32) for v in frame[exported["vector"]]])
    x = frame[exported["columns"]].to_numpy(dtype=np.float64)
    for i, name in enumerate(exported["columns"]):
        if name in exported["impute"]:
            x[np.isnan(x[:, i]), i] = exported["impute"][name]
    if exported["mean"] is not None:
        x = x - np.asarray(exported["mean"])
    if exported["std"] is not None:
        std = np.asarray(exported["std"])
        # Spark's StandardScaler gives 0.0 for a feature whose standard deviation is 0.
        x = np.where(std == 0, 0.0, x / np.where(std == 0, 1.0, std))
    return x.astype(np.float32)
