"""The Spark ML feature pipeline: fitted on the train split only, saved with the dataset, reused by scoring.

Tabular inputs go through imputer -> string indexer -> one-hot -> vector assembler -> standard scaler
(each as configured); the result becomes the `features` column as a float32 array. Inputs that arrive
as one numeric vector (digits, images, synthetic) need no pipeline and pass through unchanged.
"""

from __future__ import annotations

from data_prep.manifest import qualify_url, read_manifest
from data_prep.validate import require_column
from sparkml_par.config import ColumnSpec, FeaturizeConfig
from sparkml_par.errors import SparkmlParError

FEATURES = "features"
PIPELINE_DIR = "feature_pipeline"
_VECTOR = "_features_vector"
_SCALED = "_features_scaled"


def needs_pipeline(specs: list[ColumnSpec]) -> bool:
    return not (len(specs) == 1 and specs[0].type == "vector")


def fit_feature_pipeline(train_df, specs: list[ColumnSpec], cfg: FeaturizeConfig):
    """Fits the configured stages on the train split (never on validation or test rows)."""
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import Imputer, OneHotEncoder, StandardScaler, StringIndexer, VectorAssembler

    vectors = [s.name for s in specs if s.type == "vector"]
    if vectors:
        raise SparkmlParError(
            f"data.features: vector column(s) {vectors} cannot be mixed with other feature columns; "
            f"declare one vector column alone, or only scalar (float, int, string) columns")
    numeric = [s.name for s in specs if s.type in ("float", "int")]
    strings = [s.name for s in specs if s.type == "string"]
    stages, assembled = [], []
    if numeric and cfg.impute != "none":
        imputed = [f"{n}__imputed" for n in numeric]
        stages.append(Imputer(inputCols=numeric, outputCols=imputed, strategy=cfg.impute))
        assembled += imputed
    else:
        assembled += numeric
    if strings:
        indexed = [f"{s}__index" for s in strings]
        # "keep" gives categories unseen in training (or at scoring time) their own index.
        stages.append(StringIndexer(inputCols=strings, outputCols=indexed, handleInvalid="keep"))
        if cfg.one_hot:
            encoded = [f"{s}__onehot" for s in strings]
            stages.append(OneHotEncoder(inputCols=indexed, outputCols=encoded, handleInvalid="keep"))
            assembled += encoded
        else:
            assembled += indexed
    stages.append(VectorAssembler(inputCols=assembled, outputCol=_VECTOR))
    if cfg.scale:
        stages.append(StandardScaler(inputCol=_VECTOR, outputCol=_SCALED, withMean=True, withStd=True))
    return Pipeline(stages=stages).fit(train_df)


def transform(model, df):
    """Applies a fitted pipeline and leaves `features` as a float32 array, dropping the helper columns."""
    from pyspark.ml.functions import vector_to_array

    out = model.transform(df)
    vector = _SCALED if _SCALED in out.columns else _VECTOR
    added = [c for c in out.columns if c not in df.columns]
    return out.withColumn(FEATURES, vector_to_array(vector, "float32")).drop(*added)


def typed_inputs(df, types: dict[str, str]):
    """Raw columns cast the way validation types them, so scoring feeds the pipeline the same inputs."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import NumericType

    casts = {}
    for name, kind in types.items():
        column = F.col(f"`{name}`")
        if kind == "string":
            casts[name] = column.cast("string")
        elif isinstance(df.schema[name].dataType, NumericType):
            casts[name] = column.cast("double")
        else:
            casts[name] = F.expr(f"try_cast(`{name}` AS double)")
    return df.withColumns(casts)


def apply_feature_pipeline(spark_df, dataset_path: str):
    """Produces the dataset's `features` column from a raw DataFrame, exactly as data_prep did."""
    from pyspark.ml import PipelineModel

    spark = spark_df.sparkSession
    manifest = read_manifest(spark, dataset_path)
    if manifest is None:
        raise SparkmlParError(f"{dataset_path!r} is not a dataset (no _manifest.json); pass the data.output "
                              f"directory of a finished `sparkml-par prepare` run")
    types = manifest.get("raw_feature_types", {})
    for name in manifest["raw_feature_columns"]:
        require_column(name, spark_df.columns, "scoring input",
                       fix=f"the model's features are built from the raw columns {manifest['raw_feature_columns']!r}: "
                           f"give the input all of them")
    if manifest["feature_pipeline"] is None:
        (name,) = manifest["raw_feature_columns"]
        return spark_df.withColumn(FEATURES, spark_df[f"`{name}`"].cast("array<float>"))
    model = PipelineModel.load(f"{qualify_url(dataset_path)}/{manifest['feature_pipeline']}")
    return transform(model, typed_inputs(spark_df, types))
