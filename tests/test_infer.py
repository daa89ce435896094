"""Batch scoring: the Spark UDF against the model run in this process, metrics, output, and every refusal."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from data_prep.job import prepare
from sparkml_par.config import load_config
from sparkml_par.errors import SparkmlParError
from sparkml_par.infer import score, score_job
from sparkml_par.infer.metrics import classification_metrics
from sparkml_par.models.registry import build_from_spec
from sparkml_par.spark_runtime.spark_jobs import spark_job
from sparkml_par.train.artifact import load_model_artifact, write_model_artifact
from sparkml_par.train.job import build_train_job, train

TOLERANCE = 1e-6


def _prepared(spark, root: Path, *overrides: str):
    cfg = load_config(
        None, [f"data.output={root}/dataset", f"train.output={root}/train", "data.max_shards=2", *overrides]
    )
    result = prepare(spark, cfg.data)
    return cfg, result.manifest


def _untrained_artifact(root: Path, cfg, manifest) -> Path:
    """An artifact written exactly as training writes one, with the seeded initial weights."""
    job = build_train_job(manifest, f"file://{root}/dataset", cfg, 1)
    torch.manual_seed(0)
    model = build_from_spec(job.model_spec)
    return write_model_artifact(root / "train" / "model", model.state_dict(), job.description, {}, cfg.to_yaml())


@pytest.fixture(scope="module")
def classifier(spark, tmp_path_factory):
    """A trained 3-class MLP on 8 synthetic features (one epoch, one rank)."""
    root = tmp_path_factory.mktemp("classifier")
    cfg, _ = _prepared(
        spark,
        root,
        "data.source=synthetic",
        "data.synthetic.rows=600",
        "data.synthetic.features=8",
        "data.synthetic.classes=3",
        "train.model=mlp",
        "train.model_args={hidden: [16]}",
        "train.epochs=1",
        "train.num_proc=1",
        "train.batch_size=32",
    )
    train(spark, cfg)
    return root, cfg


@pytest.fixture(scope="module")
def regressor(spark, tmp_path_factory):
    """A regression artifact (6 features, seeded initial weights) and 300 labelled rows as plain Parquet."""
    from sparkml_par.models.registry import model_spec

    root = tmp_path_factory.mktemp("regressor")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((300, 6)).astype(np.float32)
    y = x.sum(axis=1) + rng.standard_normal(300).astype(np.float32)
    rows = [(i, x[i].tolist(), float(y[i])) for i in range(300)]
    spark.createDataFrame(rows, "_row_id bigint, features array<float>, label float").repartition(3).write.parquet(
        str(root / "rows")
    )
    spec = model_spec("mlp", {"hidden": [8]}, (6,), 1)
    description = {
        "spec": spec,
        "task": "regression",
        "num_classes": 0,
        "classes": None,
        "feature_shape": [6],
        "dataset": None,
        "feature_pipeline": None,
        "raw_feature_columns": ["features"],
        "raw_feature_types": {"features": "vector"},
        "label_column": "label",
    }
    torch.manual_seed(0)
    write_model_artifact(root / "train" / "model", build_from_spec(spec).state_dict(), description, {}, "")
    return root


@pytest.fixture(scope="module")
def tabular(spark, tmp_path_factory):
    """Raw CSV rows with a fitted feature pipeline (numbers scaled, a category one-hot encoded)."""
    root = tmp_path_factory.mktemp("tabular")
    rng = np.random.default_rng(0)
    lines = ["id,size,weight,colour,label"]
    for i in range(240):
        lines.append(f"{i},{rng.normal():.4f},{rng.normal(5, 2):.4f},{['red', 'green', 'blue'][i % 3]},{i % 2}")
    (root / "raw.csv").write_text("\n".join(lines) + "\n")
    features = "[{name: size, type: float}, {name: weight, type: float}, {name: colour, type: string}]"
    cfg, manifest = _prepared(
        spark,
        root,
        "data.source=csv",
        f"data.path={root}/raw.csv",
        f"data.features={features}",
        "train.model=mlp",
        "train.model_args={hidden: [8]}",
    )
    _untrained_artifact(root, cfg, manifest)
    return root, cfg


def _in_process(model_dir: Path, features: np.ndarray) -> np.ndarray:
    """The artifact's model applied in this process, without any scoring code: raw outputs."""
    model, description = load_model_artifact(model_dir)
    shape = [-1] + description["spec"]["input_shape"]
    with torch.no_grad():
        return model(torch.from_numpy(features.astype(np.float32)).reshape(shape)).numpy()


def _split_rows(root: Path, split: str = "dataset/test"):
    table = pq.read_table(root / split).to_pandas().sort_values("_row_id")
    return table["_row_id"].to_numpy(), np.stack(table["features"].to_numpy()), table["label"].to_numpy()


def _collected(df, id_column: str = "_row_id"):
    return df.toPandas().sort_values(id_column).reset_index(drop=True)


def _config(root: Path, *overrides: str):
    return load_config(
        None,
        [f"data.output={root}/dataset", f"train.output={root}/train", f"score.output={root}/predictions", *overrides],
    )


# --- the UDF computes what the model computes ------------------------------------------------------------


@pytest.mark.stack
def test_udf_classes_and_probabilities_equal_the_model_in_process(spark, classifier):
    root, _ = classifier
    # A dataset directory: its test split is scored.
    predictions = _collected(score(spark, f"{root}/dataset", f"{root}/train/model", batch_size=7))
    ids, features, labels = _split_rows(root)
    expected = torch.softmax(torch.from_numpy(_in_process(root / "train" / "model", features)), dim=1).numpy()

    assert list(predictions.columns) == ["_row_id", "label", "prediction", "probabilities"]
    assert predictions["_row_id"].tolist() == ids.tolist()
    assert predictions["label"].tolist() == labels.tolist()
    probabilities = np.stack(predictions["probabilities"].to_numpy())
    np.testing.assert_allclose(probabilities, expected, rtol=0, atol=TOLERANCE)
    assert predictions["prediction"].tolist() == expected.argmax(axis=1).tolist()
    assert len(set(predictions["prediction"])) > 1  # a trained model, not one constant answer


def test_udf_regression_values_equal_the_model_in_process(spark, regressor):
    predictions = _collected(score(spark, regressor / "rows", regressor / "train" / "model"))
    ids, features, _ = _split_rows(regressor, "rows")

    assert list(predictions.columns) == ["_row_id", "label", "prediction"]
    assert predictions["_row_id"].tolist() == ids.tolist()
    np.testing.assert_allclose(
        predictions["prediction"].to_numpy(),
        _in_process(regressor / "train" / "model", features)[:, 0],
        rtol=0,
        atol=TOLERANCE,
    )


@pytest.mark.stack
def test_raw_rows_go_through_the_saved_feature_pipeline_first(spark, tabular):
    from data_prep.score_rows import apply_feature_pipeline

    root, _ = tabular
    raw = spark.read.option("header", "true").option("inferSchema", "true").csv(f"{root}/raw.csv")
    predictions = _collected(score(spark, raw, f"{root}/train/model", id_column="id"), "id")
    featurized = apply_feature_pipeline(raw, f"file://{root}/dataset").select("id", "features").toPandas()
    featurized = featurized.sort_values("id")
    expected = torch.softmax(
        torch.from_numpy(_in_process(root / "train" / "model", np.stack(featurized["features"].to_numpy()))), 1
    ).numpy()

    assert predictions["id"].tolist() == list(range(240))
    np.testing.assert_allclose(np.stack(predictions["probabilities"].to_numpy()), expected, rtol=0, atol=TOLERANCE)
    assert predictions["prediction"].tolist() == expected.argmax(axis=1).tolist()


# --- the job: output, metrics, defaults ------------------------------------------------------------------


def test_job_defaults_to_the_models_test_split_and_writes_predictions_with_metrics(spark, classifier):
    root, _ = classifier
    result = score_job(spark, _config(root))  # score.input and score.model unset

    output = root / "predictions"
    written = pq.read_table(output).to_pandas().sort_values("_row_id")
    ids, _, labels = _split_rows(root)
    assert result.rows == len(ids) == len(written)
    assert written["_row_id"].tolist() == ids.tolist()
    assert not list(root.glob("predictions.*"))  # no staging or retired directory left behind

    predicted = written["prediction"].to_numpy()
    confusion = [[int(np.sum((labels == i) & (predicted == j))) for j in range(3)] for i in range(3)]
    report = json.loads((output / "_metrics.json").read_text())
    assert report["rows"] == len(ids)
    assert report["metrics"] == result.metrics
    assert result.metrics["confusion_matrix"] == confusion
    assert result.metrics["accuracy"] == pytest.approx(np.mean(predicted == labels))
    for k in range(3):
        assert result.metrics["recall"][k] == _mean_or_none(predicted[labels == k] == k)
        assert result.metrics["precision"][k] == _mean_or_none(labels[predicted == k] == k)


def _mean_or_none(hits: np.ndarray):
    return pytest.approx(float(np.mean(hits))) if len(hits) else None


def test_job_replaces_earlier_predictions_and_scores_a_given_input(spark, classifier):
    root, _ = classifier
    cfg = _config(
        root,
        f"score.input={root}/dataset/validation",
        f"score.model={root}/train/model",
        "score.output=" + str(root / "validation_predictions"),
    )
    score_job(spark, _config(root, "score.output=" + str(root / "validation_predictions")))
    result = score_job(spark, cfg)

    manifest = json.loads((root / "dataset" / "_manifest.json").read_text())
    assert result.rows == manifest["splits"]["validation"]["rows"]
    assert len(pq.read_table(root / "validation_predictions")) == result.rows
    assert not list(root.glob("validation_predictions.*"))


def test_regression_metrics_are_mse_and_mae(spark, regressor):
    result = score_job(spark, _config(regressor, f"score.input={regressor}/rows"))
    written = pq.read_table(regressor / "predictions").to_pandas()
    error = written["prediction"].to_numpy(np.float64) - written["label"].to_numpy(np.float64)

    assert result.metrics["rows_evaluated"] == len(written) > 0
    assert result.metrics["mse"] == pytest.approx(np.mean(error**2))
    assert result.metrics["mae"] == pytest.approx(np.mean(np.abs(error)))


def test_unlabelled_input_is_scored_without_metrics(spark, classifier, tmp_path):
    root, _ = classifier
    spark.read.parquet(f"{root}/dataset/test").drop("label").write.parquet(str(tmp_path / "unlabelled"))
    result = score_job(spark, _config(root, f"score.input={tmp_path}/unlabelled", f"score.output={tmp_path}/out"))
    assert result.metrics is None
    assert json.loads((tmp_path / "out" / "_metrics.json").read_text())["metrics"] is None
    assert pq.read_table(tmp_path / "out").column_names == ["_row_id", "prediction", "probabilities"]


def test_metrics_from_pair_counts():
    # label 0: 3 right, 1 predicted as 1; label 1: 2 right; one label 7 (out of range); 2 unlabelled.
    metrics = classification_metrics({(0, 0): 3, (0, 1): 1, (1, 1): 2, (7, 0): 1, (None, 1): 2}, 3)
    assert metrics["confusion_matrix"] == [[3, 1, 0], [0, 2, 0], [0, 0, 0]]
    assert metrics["rows_evaluated"] == 7 and metrics["rows_unlabelled"] == 2
    assert metrics["labels_invalid"] == 1
    assert metrics["accuracy"] == pytest.approx(5 / 7)
    assert metrics["precision"] == [1.0, pytest.approx(2 / 3), None]
    assert metrics["recall"] == [0.75, 1.0, None]


def test_labels_that_are_no_class_are_invalid_not_truncated(spark):
    from sparkml_par.infer.metrics import evaluate

    rows = [("1", 1), ("1.5", 1), ("0", 0), ("7", 0), (None, 1), ("setosa", 0), ("virginica", 2), ("daisy", 2)]
    predictions = spark.createDataFrame(rows, "label string, prediction long")
    named = evaluate(predictions, "label", "classification", 3, ["setosa", "versicolor", "virginica"])
    # 1.5 is no class (not 1), 7 is out of range, daisy is no class name: three wrong, none evaluated as a class
    assert named["labels_invalid"] == 3 and named["rows_unlabelled"] == 1 and named["rows_evaluated"] == 7
    assert named["confusion_matrix"] == [[2, 0, 0], [0, 1, 0], [0, 0, 1]]
    numbered = evaluate(
        predictions.where("label NOT IN ('setosa', 'virginica', 'daisy')"), "label", "classification", 3
    )
    assert numbered["labels_invalid"] == 2 and numbered["accuracy"] == pytest.approx(2 / 4)


# --- refusals --------------------------------------------------------------------------------------------


def test_missing_model_path(spark, classifier, tmp_path):
    root, _ = classifier
    with pytest.raises(SparkmlParError, match=r"model artifact '.*nowhere' does not exist; train a model first"):
        score(spark, f"{root}/dataset/test", str(tmp_path / "nowhere"))


def test_incomplete_artifact(spark, classifier, tmp_path):
    root, _ = classifier
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.json").write_text("{}")
    with pytest.raises(SparkmlParError, match=r"is incomplete: weights.pt missing"):
        score(spark, f"{root}/dataset/test", str(tmp_path / "model"))


def test_missing_input_path(spark, classifier, tmp_path):
    root, _ = classifier
    with pytest.raises(SparkmlParError, match=r"score.input '.*absent' does not exist; point score.input at"):
        score(spark, str(tmp_path / "absent"), f"{root}/train/model")


def test_missing_raw_feature_columns_are_named_with_suggestions(spark, tabular):
    root, _ = tabular
    raw = spark.read.option("header", "true").csv(f"{root}/raw.csv")
    renamed = raw.withColumnRenamed("colour", "color").drop("weight")
    with pytest.raises(SparkmlParError) as caught:
        score(spark, renamed, f"{root}/train/model", id_column="id")
    message = str(caught.value)
    assert "columns 'weight', 'colour' (did you mean 'color'?) missing" in message
    assert "raw columns ['size', 'weight', 'colour']" in message
    assert "the input's columns are 'id', 'size', 'color', 'label'" in message


def test_missing_id_column(spark, classifier):
    root, _ = classifier
    with pytest.raises(
        SparkmlParError,
        match=r"score.id_column: column '_rowid' \(did you mean '_row_id'\?\) "
        r"missing; set score.id_column",
    ):
        score(spark, f"{root}/dataset/test", f"{root}/train/model", id_column="_rowid")


def test_features_of_the_wrong_type(spark, classifier):
    root, _ = classifier
    df = spark.read.parquet(f"{root}/dataset/test").selectExpr("_row_id", "cast(features as string) as features")
    with pytest.raises(
        SparkmlParError,
        match=r"column 'features' has type string, but the model reads an array "
        r"of 8 numbers",
    ):
        score(spark, df, f"{root}/train/model")


def _with_jobs(spark, call):
    """(call()'s result, the ids of the Spark jobs it ran). The status tracker learns of jobs in their order,
    so once a later job in another group shows, any job of call() shows too."""
    sc = spark.sparkContext
    with spark_job(sc, "the call whose jobs are counted") as measured:
        result = call()
    with spark_job(sc, "a job after it") as after:
        spark.range(1).collect()
    deadline = time.monotonic() + 60
    while not sc.statusTracker().getJobIdsForGroup(after.group) and time.monotonic() < deadline:
        time.sleep(0.05)
    return result, list(sc.statusTracker().getJobIdsForGroup(measured.group))


def test_features_of_the_wrong_length_fail_the_lazy_predictions_naming_row_width_and_fix(spark, classifier):
    """score() reads no row: the first action over its predictions fails at a row of the wrong width."""
    root, _ = classifier
    df = spark.read.parquet(f"{root}/dataset/test").selectExpr("_row_id", "slice(features, 1, 5) as features")
    predictions, jobs = _with_jobs(spark, lambda: score(spark, df, f"{root}/train/model"))
    assert jobs == []
    with pytest.raises(
        Exception,
        match=r"score input: row with _row_id=\d+ has 5 features values but the model expects 8 "
        r"\(input shape \[8\]\); fix or remove that row, or score data prepared like the model's dataset '.*dataset'",
    ):
        predictions.collect()


def test_a_whole_input_of_another_width_is_named_as_such_by_the_scoring_job(spark, classifier, tmp_path):
    root, _ = classifier
    df = spark.read.parquet(f"{root}/dataset/test")
    df.selectExpr("_row_id", "slice(features, 1, 5) as features", "label").write.parquet(str(tmp_path / "narrow"))
    cfg = _config(root, f"score.input={tmp_path}/narrow", f"score.output={tmp_path}/out")
    with pytest.raises(
        SparkmlParError,
        match=r"^scoring input: 'features' arrays have 5 values, but the model expects 8 \(input shape \[8\]\); "
        r"score data prepared like the model's dataset",
    ):
        score_job(spark, cfg)
    assert not (tmp_path / "out").exists()


def test_one_bad_row_fails_the_job_naming_the_row(spark, classifier, tmp_path):
    root, _ = classifier
    df = spark.read.parquet(f"{root}/dataset/test")
    last = df.agg({"_row_id": "max"}).first()[0]
    bad = df.selectExpr("_row_id", f"if(_row_id = {last}, slice(features, 1, 3), features) as features", "label")
    bad.write.parquet(str(tmp_path / "bad"))
    cfg = _config(root, f"score.input={tmp_path}/bad", f"score.output={tmp_path}/out")
    with pytest.raises(
        SparkmlParError,
        match=rf"row with _row_id={last} has 3 features values but the model "
        rf"expects 8 \(input shape \[8\]\); fix or remove that row",
    ):
        score_job(spark, cfg)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob("out.*"))


def test_output_that_holds_something_else_is_not_replaced(spark, classifier, tmp_path):
    root, _ = classifier
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("keep me")
    with pytest.raises(SparkmlParError, match=r"score.output '.*out' already exists and holds no predictions"):
        score_job(spark, _config(root, f"score.output={tmp_path}/out"))
    assert (tmp_path / "out" / "notes.txt").read_text() == "keep me"


# --- entry points ----------------------------------------------------------------------------------------


def test_spark_submit_script_scores_and_reports_errors(spark, classifier, tmp_path, capsys):
    from sparkml_par.cli import run_job  # what jobs/score.py runs

    root, _ = classifier
    common = ["--config", "conf/quickstart.yaml", f"data.output={root}/dataset", f"train.output={root}/train"]
    assert run_job("score", common + [f"score.output={tmp_path}/out"]) == 0
    assert "accuracy" in capsys.readouterr().out
    assert (tmp_path / "out" / "_metrics.json").is_file()
    assert run_job("score", common + [f"score.model={tmp_path}/missing"]) == 2
    assert "does not exist" in capsys.readouterr().err


# --- the predictor's cache and device --------------------------------------------------------------------


def test_predictor_is_loaded_once_per_process_and_again_after_retraining(classifier, tmp_path):
    import shutil

    from sparkml_par.infer.predictor import cached_predictor

    root, _ = classifier
    artifact = shutil.copytree(root / "train" / "model", tmp_path / "model")
    first = cached_predictor(str(artifact), "cpu")
    assert cached_predictor(str(artifact), "cpu") is first
    model, description = load_model_artifact(artifact)
    state = {name: value + 1.0 for name, value in model.state_dict().items()}
    write_model_artifact(artifact, state, description, {}, "")
    reloaded = cached_predictor(str(artifact), "cpu")
    assert reloaded is not first
    torch.testing.assert_close(next(reloaded.model.parameters()), next(first.model.parameters()) + 1.0)


def test_task_device_is_the_gpu_spark_assigned(monkeypatch):
    import pyspark
    from pyspark.resource import ResourceInformation

    from sparkml_par.infer.predictor import task_device

    class FakeContext:
        def resources(self):
            return {"gpu": ResourceInformation("gpu", ["3"])}

    assert task_device() == ("cuda:0" if torch.cuda.is_available() else "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: FakeContext()))
    assert task_device() == "cuda:3"
    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: None))
    assert task_device() == "cuda:0"
