"""The feature pipeline built from the train split's statistics transforms rows as Spark ML's pipeline
fitted stage by stage does, and its features computed from Arrow batches (as prepare's write tasks do)
equal its Spark ML pipeline's."""

from __future__ import annotations

import numpy as np
import pytest

from data_prep import featurize
from data_prep.profile import column_statistics
from sparkml_par.config import ColumnSpec, FeaturizeConfig

SPECS = [ColumnSpec("distance", "float"), ColumnSpec("delay", "int"), ColumnSpec("carrier", "string")]
TRAIN = [
    (1.0, 3, "UA"),
    (None, 7, "AA"),
    (2.5, None, "UA"),
    (4.0, 1, "DL"),
    (None, 2, "AA"),
    (10.0, 9, "B6"),  # B6 and DL tie: text order decides, as StringIndexer's frequencyDesc does
    (7.5, 4, "UA"),
]
# Scored rows: a category unseen in train, and missing numbers.
SCORED = TRAIN + [(3.0, None, "WN"), (None, None, "DL")]


def _fit(train, config: FeaturizeConfig):
    """The pipeline built as prepare builds it: from the statistics of these rows as the train split, their
    categories counted (with a label, which the statistics always read: one of the rows' values, as
    prepare's is)."""
    rows = train.selectExpr("*", "'train' AS _split", "length(carrier) AS label")
    numbers = featurize.number_inputs(SPECS)
    statistics = column_statistics(rows, "label", SPECS, numbers, medians=config.impute == "median", counts=True)
    return featurize.fit_feature_pipeline(train, SPECS, config, statistics)


def _stage_by_stage(train, config: FeaturizeConfig):
    """Spark ML's own Pipeline, fitted estimator by estimator on the same plain columns."""
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import Imputer, OneHotEncoder, StandardScaler, StringIndexer, VectorAssembler

    stages = [
        Imputer(inputCols=["distance", "delay"], outputCols=["d_i", "t_i"], strategy=config.impute),
        StringIndexer(inputCol="carrier", outputCol="c_ix", handleInvalid="keep", stringOrderType="frequencyDesc"),
        # The indexer's "keep" already gives unseen categories a slot of their own, the last.
        OneHotEncoder(inputCols=["c_ix"], outputCols=["c_oh"], handleInvalid="error", dropLast=False),
        VectorAssembler(inputCols=["d_i", "t_i", "c_oh"], outputCol="v"),
        StandardScaler(inputCol="v", outputCol="scaled", withMean=True, withStd=True),
    ]
    return Pipeline(stages=stages).fit(train)


@pytest.mark.parametrize("impute", ["median", "mean"])
def test_pipeline_from_statistics_equals_the_fitted_spark_ml_pipeline(spark, impute):
    from pyspark.ml.feature import ImputerModel
    from pyspark.ml.functions import vector_to_array

    schema = "distance double, delay int, carrier string"
    train = spark.createDataFrame(TRAIN, schema)
    scored = spark.createDataFrame(SCORED, schema)
    config = FeaturizeConfig(impute=impute, max_categories=0)

    fitted = _fit(train, config)
    model = featurize.build_pipeline(scored, SPECS, fitted.recipe)
    ours, size = featurize.transform(model, scored)
    reference = _stage_by_stage(train, config).transform(scored).select(vector_to_array("scaled").alias("f"))

    got = np.array([row[featurize.FEATURES] for row in ours.collect()], dtype=np.float64)
    want = np.array([row["f"] for row in reference.collect()])
    assert size == 2 + 4 + 1 == want.shape[1]  # two numbers, four carriers and <other>
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # float32 features
    assert fitted.categories == {"carrier": {"distinct": 4, "kept": 4}}
    (imputer,) = [stage for stage in model.stages if isinstance(stage, ImputerModel)]
    assert imputer.getStrategy() == impute  # the saved pipeline says how its gaps are filled


def test_categories_past_the_cap_and_unseen_ones_share_other(spark):
    train = spark.createDataFrame(TRAIN, "distance double, delay int, carrier string")
    fitted = _fit(train, FeaturizeConfig(impute="median", max_categories=2, scale=False))
    scored = spark.createDataFrame([(1.0, 1, "DL"), (1.0, 1, "WN"), (1.0, 1, "UA"), (1.0, 1, "AA")], train.schema)
    model = featurize.build_pipeline(scored, SPECS, fitted.recipe)
    rows = [row[featurize.FEATURES][2:] for row in featurize.transform(model, scored)[0].collect()]
    # UA (3 rows) and AA (2) are kept; DL and the unseen WN are <other>.
    assert rows == [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    assert fitted.categories == {"carrier": {"distinct": 4, "kept": 2}}


def test_a_number_column_with_no_value_in_train_is_named(spark):
    from sparkml_par.errors import SparkmlParError

    train = spark.createDataFrame([(None, 1, "UA"), (None, 2, "AA")], "distance double, delay int, carrier string")
    with pytest.raises(SparkmlParError, match="'distance': every value is missing in the train split"):
        _fit(train, FeaturizeConfig(impute="median"))


@pytest.mark.parametrize(
    "config",
    [
        FeaturizeConfig(impute="median", max_categories=0),
        FeaturizeConfig(impute="mean", max_categories=2, scale=False),
        FeaturizeConfig(impute="median", one_hot=False),
    ],
    ids=["one-hot-scaled", "capped-unscaled", "indexed"],
)
def test_features_from_arrow_batches_equal_the_spark_ml_pipelines(spark, config):
    """BatchFeatures in a mapInArrow task, as prepare's write tasks run it, against the Spark ML pipeline of
    the same recipe, which scoring runs: the same float32 values, bit for bit."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    # Validated rows, as prepare holds them: every number a double.
    schema = "distance double, delay int, carrier string"
    train = spark.createDataFrame(TRAIN, schema).withColumn("delay", F.col("delay").cast("double"))
    scored = spark.createDataFrame(SCORED, schema).withColumn("delay", F.col("delay").cast("double"))
    scored = scored.withColumn("id", F.monotonically_increasing_id())
    recipe = _fit(train, config).recipe
    encode = featurize.BatchFeatures(SPECS, recipe)
    inputs = scored.select("id", *[F.expr(sql) for sql in encode.inputs])

    def batches(tables):
        for batch in tables:
            yield from encode(pa.Table.from_batches([batch])).to_batches()

    ours = inputs.mapInArrow(batches, encode.schema(inputs.schema)).orderBy("id").collect()
    spark_ml, size = featurize.transform(featurize.build_pipeline(scored, SPECS, recipe), scored)
    want = np.array([row[featurize.FEATURES] for row in spark_ml.orderBy("id").collect()], dtype=np.float32)
    got = np.array([row[featurize.FEATURES] for row in ours], dtype=np.float32)
    assert encode.size == size == want.shape[1]
    assert [f.name for f in encode.schema(inputs.schema).fields] == ["id", featurize.FEATURES]
    np.testing.assert_array_equal(got, want)
