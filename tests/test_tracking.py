"""Experiment tracking against a real MLflow tracking server on loopback (tests/mlflow_server.py), queried
through MlflowClient: the run tree, params, per-epoch metrics, artifacts, the pyfunc model and its spark_udf,
the registry, a server that is down, and a rerun that continues the same MLflow run."""

from __future__ import annotations

import json
import socket
import sys

import foreign_data
import mlflow.pyfunc
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from mlflow_server import MlflowServer

from sparkml_par.config import load_config
from sparkml_par.errors import SparkmlParError
from sparkml_par.pipeline import run_pipeline
from sparkml_par.tracking import SKIPPED_TAG, STAGE_TAG, STATE_FILE, Tracker


@pytest.fixture(scope="module")
def server():
    started = MlflowServer()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def diabetes_csv(tmp_path_factory):
    return foreign_data.write(foreign_data.frame("diabetes"), tmp_path_factory.mktemp("diabetes"), "csv")


def _config(csv, root, *extra):
    return load_config(
        None,
        [
            "data.source=csv",
            f"data.path={csv}",
            "data.label=progression",
            "data.task=regression",
            "data.max_shards=2",
            f"data.output={root}/dataset",
            "train.model=mlp",
            "train.model_args={hidden: [16]}",
            "train.epochs=3",
            "train.batch_size=32",
            "train.num_proc=2",
            f"train.output={root}/model",
            f"score.output={root}/predictions",
            f"tune.output={root}/tune",
            f"output.run_dir={root}/run",
            *extra,
        ],
    )


def _children(client: MlflowClient, run) -> dict[str, object]:
    found = client.search_runs([run.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    return {child.data.tags["mlflow.runName"]: child for child in found}


@pytest.mark.stack
def test_a_tracked_run_is_one_mlflow_run_with_its_stages_trials_metrics_and_model(
    spark, server, diabetes_csv, tmp_path
):
    cfg = _config(
        diabetes_csv,
        tmp_path,
        f"tracking.tracking_uri={server.uri}",
        "tracking.experiment=pipelines",
        "tracking.run_name=nightly",
        "tracking.tags={team: ml}",
        "tracking.register_model=diabetes",
        "tune.space={train.lr: {type: loguniform, low: 1.0e-3, high: 1.0e-1}}",
        "tune.trials=2",
        "tune.parallelism=1",
    )
    records = run_pipeline(spark, cfg)
    client = MlflowClient(server.uri)
    # MLflow 3.0 lists a run's artifacts through the process's tracking URI, whatever the client's (3.17 does not).
    mlflow.set_tracking_uri(server.uri)
    (parent,) = client.search_runs(
        [client.get_experiment_by_name("pipelines").experiment_id], filter_string="tags.mlflow.runName = 'nightly'"
    )
    assert parent.info.status == "FINISHED" and parent.data.tags["team"] == "ml"
    assert parent.data.params["train.epochs"] == "3" and parent.data.params["data.label"] == "progression"
    stages = _children(client, parent)
    assert sorted(stages) == ["prepare", "report", "score", "train", "tune"]
    assert all(run.info.status == "FINISHED" for run in stages.values())

    prepare = stages["prepare"]
    assert prepare.data.metrics["rows_clean"] == records["prepare"].summary["rows_clean"] == 442
    assert prepare.data.tags["fingerprint"] == records["prepare"].summary["fingerprint"]

    trials = _children(client, stages["tune"])
    assert sorted(trials) == ["trial 0", "trial 1"]
    table = json.loads((tmp_path / "tune" / "trials.json").read_text())
    for row in table:
        trial = trials[f"trial {row['number']}"]
        assert float(trial.data.params["train.lr"]) == pytest.approx(row["params"]["train.lr"])
        assert trial.data.metrics["val_loss"] == pytest.approx(row["score"])

    train = stages["train"]
    history = [json.loads(line) for line in (tmp_path / "model" / "metrics.jsonl").read_text().splitlines()]
    logged = client.get_metric_history(train.info.run_id, "train_loss")
    assert [(m.step, m.value) for m in logged] == [(r["epoch"], pytest.approx(r["train_loss"])) for r in history]
    assert train.data.metrics["test_mse"] == pytest.approx(records["train"].summary["test"]["mse"])
    artifacts = {a.path for a in client.list_artifacts(train.info.run_id)}
    assert {"metrics.jsonl", "model"} <= artifacts
    assert {"model/MLmodel", "model/input_example.json"} <= {
        a.path for a in client.list_artifacts(train.info.run_id, "model")
    }
    assert stages["score"].data.metrics["metrics.mse"] == pytest.approx(records["score"].summary["metrics"]["mse"])
    report = {a.path for a in client.list_artifacts(stages["report"].info.run_id, "report")}
    assert "report/index.html" in report
    dataset = {a.path for a in client.list_artifacts(stages["report"].info.run_id, "dataset")}
    assert {"dataset/_manifest.json", "dataset/profile.json"} <= dataset

    (version,) = client.search_model_versions("name = 'diabetes'")
    assert version.run_id == train.info.run_id

    # The MLflow model scores raw columns as `sparkml-par score` does: in pandas and as a Spark UDF.
    uri = f"runs:/{train.info.run_id}/model"
    raw = foreign_data.frame("diabetes")
    # The features prepare inferred: not the label, nor the id (a whole number unique per row, so left out).
    columns = [c for c in raw.columns if c not in ("progression", "patient")]
    raw[columns] = raw[columns].astype("float64")  # the model's signature: prepare read every column as float
    scored = pd.read_parquet(tmp_path / "predictions").sort_values("_row_id")
    rows = spark.read.parquet(str(tmp_path / "dataset" / "test")).count()
    assert len(scored) == rows > 0
    udf = mlflow.pyfunc.spark_udf(spark, uri, result_type="double", env_manager="local")
    frame = spark.createDataFrame(raw)
    by_udf = frame.withColumn("udf", udf(*columns)).select("patient", "udf").toPandas()
    in_pandas = mlflow.pyfunc.load_model(uri).predict(raw[columns])
    np.testing.assert_allclose(
        by_udf.sort_values("patient")["udf"].to_numpy(), in_pandas.to_numpy(), rtol=1e-6, atol=1e-6
    )
    # The project's own scoring of the same raw rows (the predictions above are of the dataset's test split).
    from sparkml_par.infer import score

    ours = score(spark, str(diabetes_csv), str(tmp_path / "model" / "model"), id_column="patient", source="csv")
    ours = ours.select("patient", "prediction").toPandas().sort_values("patient")
    np.testing.assert_allclose(
        ours["prediction"].to_numpy(),
        in_pandas.to_numpy()[ours["patient"].to_numpy().astype(int)],
        rtol=1e-6,
        atol=1e-6,
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_server_that_is_down_never_loses_the_run(spark, diabetes_csv, tmp_path, caplog):
    cfg = _config(diabetes_csv, tmp_path, f"tracking.tracking_uri=http://127.0.0.1:{_closed_port()}", "train.epochs=1")
    with caplog.at_level("WARNING", logger="sparkml_par"):
        records = run_pipeline(spark, cfg)
    assert records["train"].summary["epochs_run"] == 1 and (tmp_path / "predictions" / "_metrics.json").exists()
    warnings = [r.getMessage() for r in caplog.records if r.name == "sparkml_par.tracking"]
    assert len(warnings) == 1 and warnings[0].startswith("tracking: opening the experiment failed (")
    assert any("tracking: not logged to http://127.0.0.1:" in r.getMessage() for r in caplog.records)

    required = _config(diabetes_csv, tmp_path / "required", f"tracking.tracking_uri=http://127.0.0.1:{_closed_port()}")
    required.tracking.required = True
    with pytest.raises(
        SparkmlParError, match=r"tracking.tracking_uri='http://127.0.0.1:\d+': the MLflow server did not answer"
    ):
        Tracker(required.tracking, tmp_path).start(required)


def test_a_rerun_continues_the_same_mlflow_run_and_tags_what_it_skips(spark, server, diabetes_csv, tmp_path):
    """The first run fails in its score stage (its input is not there yet); the rerun continues the same
    MLflow run: prepare runs again (a new nested run), train is unchanged (a nested run tagged skipped),
    and score, which did not finish, continues its own nested run."""
    missing = tmp_path / "later.csv"
    cfg = _config(
        diabetes_csv,
        tmp_path,
        f"tracking.tracking_uri={server.uri}",
        "tracking.experiment=reruns",
        f"score.input={missing}",
        "score.source=csv",
        "score.id_column=patient",
        "train.epochs=1",
    )
    with pytest.raises(SparkmlParError):
        run_pipeline(spark, cfg)
    state = json.loads((tmp_path / "run" / STATE_FILE).read_text())
    assert not state.get("finished")
    missing.write_bytes(diabetes_csv.read_bytes())
    run_pipeline(spark, cfg)
    again = json.loads((tmp_path / "run" / STATE_FILE).read_text())
    assert again["run_id"] == state["run_id"] and again["finished"]

    client = MlflowClient(server.uri)
    parent = client.get_run(state["run_id"])
    assert parent.info.status == "FINISHED"
    found = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{state['run_id']}'"
    )
    by_stage: dict[str, list] = {}
    for run in found:
        by_stage.setdefault(run.data.tags[STAGE_TAG], []).append(run)
    assert sorted((stage, len(runs)) for stage, runs in by_stage.items()) == [
        ("prepare", 2),
        ("report", 1),
        ("score", 1),
        ("train", 2),
    ]
    assert [r.data.tags.get(SKIPPED_TAG) for r in by_stage["train"]].count("true") == 1
    (score,) = by_stage["score"]
    assert score.info.run_id == state["stages"]["score"] and score.info.status == "FINISHED"
    assert score.data.metrics["rows"] == 442


def test_tracking_off_needs_no_mlflow(monkeypatch, tmp_path):
    """MLflow is an optional extra: with no tracking_uri the stages' tracker calls import nothing of it."""
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow...` now raises ImportError
    cfg = load_config(None, [])
    tracker = Tracker(cfg.tracking, tmp_path)
    tracker.start(cfg)
    tracker.log_params(tracker.stage_run("train", resume=False), {"train.lr": 0.1})
    tracker.log_test_metrics(None, {"mse": 1.0})
    tracker.set_tags(None, {"a": "b"})
    tracker.log_file(None, str(tmp_path / "missing.jsonl"))
    tracker.log_model(None, str(tmp_path / "model"))
    assert tracker.epoch_logger(None) is None and tracker.not_logged() is None
    assert not (tmp_path / STATE_FILE).exists()
