"""The Spark ML feature pipeline: fitted on the train split only, saved with the dataset, reused by scoring.

Tabular inputs go through a copy of the columns under plain names (and date parts) -> imputer -> string
indexer -> category cap -> one-hot -> vector assembler -> standard scaler (each as configured); the result
becomes the `features` column as a float32 array. Inputs that arrive as one numeric vector (digits, images,
synthetic) need no pipeline and pass through unchanged. Every step is a stage of the saved PipelineModel, so
scoring repeats it exactly.
"""

from __future__ import annotations

import logging
from typing import Any

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


def fit_feature_pipeline(train_df, specs: list[ColumnSpec], cfg: FeaturizeConfig):
    """Fits the configured stages on the train split (never on validation or test rows)."""
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import (
        Imputer,
        OneHotEncoder,
        SQLTransformer,
        StandardScaler,
        StringIndexer,
        VectorAssembler,
    )

    vectors = [s.name for s in specs if s.type == "vector"]
    if vectors:
        raise SparkmlParError(
            f"data.features: vector column(s) {vectors} cannot be mixed with other feature columns; "
            f"declare one vector column alone, or only scalar (float, int, bool, string, timestamp, date) columns"
        )
    plain = plain_names([s.name for s in specs])
    copies, parts = [], []
    for s in specs:
        if s.type in DATETIME_PARTS:
            parts += [(f"{part}({quoted(s.name)})", f"{plain[s.name]}__{part}") for part in DATETIME_PARTS[s.type]]
        else:
            copies.append(f"{quoted(s.name)} AS {plain[s.name]}")
    selected = copies + [f"CAST({value} AS DOUBLE) AS {name}" for value, name in parts]
    stages: list[Any] = [SQLTransformer(statement=f"SELECT *, {', '.join(selected)} FROM __THIS__")]
    numeric = [plain[s.name] for s in specs if s.type in NUMERIC_TYPES] + [name for _, name in parts]
    strings = [plain[s.name] for s in specs if s.type == "string"]
    assembled = []
    if numeric and cfg.impute != "none":
        imputed = [f"{n}__imputed" for n in numeric]
        stages.append(Imputer(inputCols=numeric, outputCols=imputed, strategy=cfg.impute))
        assembled += imputed
    else:
        assembled += numeric
    if strings:
        indexed = [f"{s}__index" for s in strings]
        # Most frequent first; "keep" gives categories unseen in training (or at scoring time) their own index.
        stages.append(
            StringIndexer(inputCols=strings, outputCols=indexed, handleInvalid="keep", stringOrderType="frequencyDesc")
        )
        if cfg.max_categories:
            # Index K and above (the rarer categories, and unseen ones) is one category, <other>.
            capped = [f"{s}__capped" for s in strings]
            least = [f"LEAST({quoted(i)}, {float(cfg.max_categories)}) AS {quoted(c)}" for i, c in zip(indexed, capped)]
            stages.append(SQLTransformer(statement=f"SELECT *, {', '.join(least)} FROM __THIS__"))
            indexed = capped
        if cfg.one_hot:
            encoded = [f"{s}__onehot" for s in strings]
            # The capped index carries no ML attributes, so the encoder counts the categories in train; the
            # last slot kept (dropLast=False) is the one an unseen category takes where nothing was capped.
            stages.append(OneHotEncoder(inputCols=indexed, outputCols=encoded, handleInvalid="keep", dropLast=False))
            assembled += encoded
        else:
            assembled += indexed
    stages.append(VectorAssembler(inputCols=assembled, outputCol=_VECTOR))
    if cfg.scale:
        stages.append(StandardScaler(inputCol=_VECTOR, outputCol=_SCALED, withMean=True, withStd=True))
    return Pipeline(stages=stages).fit(train_df)


def category_counts(model, specs: list[ColumnSpec], max_categories: int) -> dict[str, dict[str, int]]:
    """Per text feature, its distinct values in train and how many the pipeline keeps (the rest are <other>);
    a warning for each column that was cut."""
    from pyspark.ml.feature import StringIndexerModel

    strings = [s.name for s in specs if s.type == "string"]
    indexers = [stage for stage in model.stages if isinstance(stage, StringIndexerModel)]
    if not strings or not indexers:
        return {}
    counts = {}
    for name, labels in zip(strings, indexers[0].labelsArray):
        kept = min(len(labels), max_categories) if max_categories else len(labels)
        counts[name] = {"distinct": len(labels), "kept": kept}
        if kept < len(labels):
            log.warning(
                "data.features %r: %d distinct values in train, the %d most frequent kept as categories and the "
                "other %d read as %s (featurize.max_categories=%d; 0 keeps all)",
                name,
                len(labels),
                kept,
                len(labels) - kept,
                OTHER_CATEGORY,
                max_categories,
            )
    return counts


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


def apply_fitted(df, pipeline_url: str | None, specs: list[ColumnSpec]):
    """`df` (validated, typed rows) with the `features` column: through the fitted pipeline saved at
    pipeline_url, or, for an input that is one numeric vector, that vector as float32."""
    from pyspark.ml import PipelineModel

    if pipeline_url is None:
        (spec,) = specs
        return df.withColumn(FEATURES, column(spec.name).cast("array<float>"))
    return transform(PipelineModel.load(pipeline_url), df)[0]


def export_fitted(pipeline_url: str | None, raw_types: dict[str, str]) -> dict | None:
    """The fitted pipeline as plain numbers, to apply without Spark (the MLflow model of an artifact): the
    assembled columns in order, each one's imputation value, the scaler's mean and standard deviation.

    None when the pipeline reads more than numbers (text, bool words, dates): the MLflow model then is not
    logged (the notice says why).
    """
    from pyspark.ml import PipelineModel
    from pyspark.ml.feature import ImputerModel, SQLTransformer, StandardScalerModel, VectorAssembler

    if pipeline_url is None:
        (name,) = raw_types
        return {"vector": name}
    if any(kind not in ("float", "int") for kind in raw_types.values()):
        return None
    raw = {plain: name for name, plain in plain_names(list(raw_types)).items()}

    def raw_name(column: str) -> str:
        name = column.removesuffix("__imputed")
        return raw.get(name, name)  # a pipeline fitted before the copy stage names the raw columns

    exported: dict = {"columns": [], "impute": {}, "mean": None, "std": None}
    for stage in PipelineModel.load(pipeline_url).stages:
        if isinstance(stage, SQLTransformer):
            continue  # the copy to plain names: numbers only, so no date parts
        if isinstance(stage, ImputerModel):
            surrogates = stage.surrogateDF.collect()[0].asDict()
            exported["impute"] = {raw_name(c): float(surrogates[c]) for c in stage.getInputCols()}
        elif isinstance(stage, VectorAssembler):
            exported["columns"] = [raw_name(c) for c in stage.getInputCols()]
        elif isinstance(stage, StandardScalerModel):
            exported["mean"] = stage.mean.toArray().tolist() if stage.getWithMean() else None
            exported["std"] = stage.std.toArray().tolist() if stage.getWithStd() else None
        else:
            return None
    return exported


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
