"""Training, scoring and tuning with their outputs on S3: a real S3 server (moto, tests/s3_server.py), real
barrier stages and Horovod ranks writing checkpoints and the artifact through sparkml_par.io.store."""

from __future__ import annotations

import io
import json
from pathlib import Path

import injected_faults
import optuna
import pytest
import torch
from run_settings import tiny_job

from data_prep.job import prepare
from sparkml_par.config import load_config
from sparkml_par.contract import COMPLETE_MARKER, TRAIN_METRICS
from sparkml_par.infer import score
from sparkml_par.io.store import Store
from sparkml_par.pipeline import run_pipeline
from sparkml_par.train.job import train
from sparkml_par.tune.job import tune

RESUMABLE = [*injected_faults.RESUMABLE, "train.epochs=3"]


@pytest.fixture(scope="module")
def dataset(spark, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("remote")
    cfg = load_config(
        None,
        [
            f"data.output={root}/dataset",
            "data.source=synthetic",
            "data.synthetic.rows=800",
            "data.synthetic.features=8",
            "data.synthetic.classes=3",
            "data.max_shards=4",
        ],
    )
    prepare(spark, cfg.data)
    return root / "dataset"


def _killing(dataset: Path, **kill) -> str:
    return injected_faults.killing_model_args(dataset, **kill)


def _weights(artifact_url: str) -> dict[str, torch.Tensor]:
    return torch.load(io.BytesIO(Store(artifact_url).read_bytes("weights.pt")), weights_only=True)


def test_a_rank_killed_while_training_to_s3_resumes_from_the_s3_checkpoint(spark, dataset, bucket, tmp_path):
    """Rank 1 dies once in epoch 2; Spark reruns the stage, which resumes from epoch 1's checkpoint on S3 and
    ends with the weights of an uninterrupted run to a local directory."""
    local = train(
        spark,
        load_config(None, [f"data.output={dataset}", f"train.output={tmp_path}/local", *RESUMABLE, _killing(dataset)]),
    )
    remote_output = f"{bucket}/run/model"
    killed_once = _killing(dataset, kill_rank=1, marker=str(tmp_path / "killed-once"))
    remote = train(
        spark, load_config(None, [f"data.output={dataset}", f"train.output={remote_output}", *RESUMABLE, killed_once])
    )

    assert (tmp_path / "killed-once").exists()
    assert remote.artifact == f"{remote_output}/model"
    assert [r["epoch"] for r in remote.history] == [1, 2, 3]
    expected = torch.load(Path(local.artifact) / "weights.pt", weights_only=True)
    got = _weights(remote.artifact)
    assert got.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=1e-6, msg=f"parameter {name}")
    out = Store(remote_output)
    assert out.names("checkpoints") == ["checkpoint-00001.pt", "checkpoint-00002.pt", "checkpoint-00003.pt"]
    assert [json.loads(line)["epoch"] for line in out.read_text(TRAIN_METRICS).splitlines()] == [1, 2, 3]
    assert out.exists(f"model/{COMPLETE_MARKER}")

    # Scoring from the S3 artifact equals scoring from a local copy of it.
    copy = tmp_path / "copy"
    Store(remote.artifact).download(copy)
    from_s3 = score(spark, f"{dataset}/test", remote.artifact).orderBy("_row_id").toPandas()
    from_local = score(spark, f"{dataset}/test", str(copy)).orderBy("_row_id").toPandas()
    assert len(from_s3) == json.loads((dataset / "_manifest.json").read_text())["splits"]["test"]["rows"] > 0
    assert from_s3["_row_id"].tolist() == from_local["_row_id"].tolist()
    assert from_s3["prediction"].tolist() == from_local["prediction"].tolist()
    for a, b in zip(from_s3["probabilities"], from_local["probabilities"]):
        assert list(a) == pytest.approx(list(b), abs=1e-6)


def test_a_search_on_s3_interrupted_and_resumed_continues_the_study(spark, dataset, bucket, tmp_path):
    output = f"{bucket}/tune"
    common = [
        f"data.output={dataset}",
        "train.model=mlp",
        "train.model_args={hidden: [16]}",
        "train.epochs=2",
        "train.batch_size=32",
        f"tune.output={output}",
        f"train.output={output}/best_model",
        "tune.method=bayes",
        "tune.parallelism=1",
        "tune.space={train.lr: {type: loguniform, low: 1.0e-3, high: 1.0e-1}}",
    ]
    first = tune(spark, load_config(None, [*common, "tune.trials=2"]))
    assert first.ran == 2 and first.best_config == f"{output}/best.yaml"
    store = Store(output)
    assert {"study.db", "trials.csv", "trials.json", "best.yaml", "scores.png"} <= set(store.names())
    assert store.exists(f"trials/0000/model/{COMPLETE_MARKER}") and store.exists(f"trials/0001/{TRAIN_METRICS}")

    # A driver killed while its third trial trained: that trial is RUNNING in the study on S3.
    (tmp_path / "study.db").write_bytes(store.read_bytes("study.db"))
    optuna.load_study(study_name="sparkml_par", storage=f"sqlite:///{tmp_path / 'study.db'}").ask()
    store.write_bytes("study.db", (tmp_path / "study.db").read_bytes())

    resumed = tune(spark, load_config(None, [*common, "tune.trials=3"]))
    assert resumed.ran == 1
    rows = json.loads(store.read_text("trials.json"))
    assert [(r["number"], r["status"]) for r in rows] == [
        (0, "complete"),
        (1, "complete"),
        (2, "stale"),
        (3, "complete"),
    ]
    assert [r["params"] for r in rows[:2]] == [r["params"] for r in first.trials]


def test_a_run_with_its_own_outputs_on_s3_skips_its_unchanged_stages_when_run_again(spark, bucket, tmp_path):
    """output.run_dir and train.output on S3 (datasets and predictions stay with Spark's filesystem): the run
    state is read back from S3, so a second run skips what is unchanged."""
    cfg = load_config(
        None,
        [
            *tiny_job(rows=300, epochs=1),
            f"output.run_dir={bucket}/run",
            f"train.output={bucket}/model",
            f"data.output={tmp_path}/dataset",
            f"score.output={tmp_path}/predictions",
        ],
    )
    first = run_pipeline(spark, cfg)
    run_dir = Store(f"{bucket}/run")
    assert {"stages.json", "config.yaml"} <= set(run_dir.names())
    assert first["report"].output == f"{bucket}/run/report/index.html" and run_dir.exists("report/index.html")
    assert json.loads(run_dir.read_text("stages.json"))["train"]["output"] == f"{bucket}/model/model"

    again = run_pipeline(spark, cfg)
    assert again["train"].summary.get("skipped") and again["score"].summary.get("skipped")
    assert again["train"].output == first["train"].output
