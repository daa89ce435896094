"""The search on Spark: trials as concurrent Spark tasks training on a real petastorm dataset."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from pathlib import Path

import optuna
import pytest
import torch
from torch import nn

from data_prep.job import prepare
from sparkml_par import cli
from sparkml_par.config import load_config
from sparkml_par.models.mlp import build_mlp
from sparkml_par.tune.job import tune
from sparkml_par.tune.study import storage_url

# 300 train rows of 3 classes, 2 small epochs: a trial trains in about a second.
_DATA = [
    "data.source=synthetic",
    "data.synthetic.rows=400",
    "data.synthetic.features=8",
    "data.synthetic.classes=3",
    "data.max_shards=2",
]
_TRAIN = [
    "train.model=mlp",
    "train.model_args={hidden: [16]}",
    "train.epochs=2",
    "train.batch_size=32",
    "train.num_proc=2",
]


@pytest.fixture(scope="module")
def dataset(spark, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tune_data")
    prepare(spark, load_config(None, [f"data.output={root}/dataset", *_DATA]).data)
    return root / "dataset"


class _Paced(nn.Module):
    """An MLP whose every forward pass also waits: a trial lasts seconds however fast the machine is, so the
    overlap of two trials shows concurrency, not luck (sleeping takes no CPU from the other trial)."""

    def __init__(self, inner: nn.Module, seconds: float, diverge: bool):
        super().__init__()
        self.inner, self.seconds, self.diverge = inner, seconds, diverge

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        out = self.inner(x)
        return out * float("nan") if self.diverge else out


def paced_mlp(*, input_shape, num_outputs, hidden=(16,), seconds=0.1, diverge=False):
    """Built by the trials through the import path 'test_tune_spark:paced_mlp' (tests/ is on the workers' path);
    diverge=True makes every output NaN, as a learning rate far too high would."""
    return _Paced(build_mlp(input_shape=input_shape, num_outputs=num_outputs, hidden=hidden), seconds, diverge)


def _config(dataset: Path, out: Path, *overrides: str):
    return load_config(
        None,
        [f"data.output={dataset}", *_DATA, *_TRAIN, f"tune.output={out}", f"train.output={out}/best_model", *overrides],
    )


def _interval(row: dict) -> tuple[datetime, datetime]:
    return datetime.fromisoformat(row["started"]), datetime.fromisoformat(row["finished"])


def test_grid_covers_the_grid_and_failing_trials_do_not_stop_it(spark, dataset, tmp_path):
    # fp16 needs a GPU: those trials raise inside their Spark task.
    cfg = _config(
        dataset,
        tmp_path,
        "tune.method=grid",
        "tune.parallelism=2",
        "tune.metric=val_accuracy",
        "tune.direction=maximize",
        "tune.space={train.lr: {type: choice, values: [0.003, 0.03]}, "
        "train.precision: {type: choice, values: [fp32, fp16]}}",
    )
    result = tune(spark, cfg)

    assert result.ran == 4
    ran = sorted((r["params"]["train.lr"], r["params"]["train.precision"], r["status"]) for r in result.trials)
    assert ran == [
        (0.003, "fp16", "failed"),
        (0.003, "fp32", "complete"),
        (0.03, "fp16", "failed"),
        (0.03, "fp32", "complete"),
    ]
    for row in result.trials:
        if row["status"] == "failed":
            assert row["error"].startswith("ConfigError: train.precision=fp16 needs GPU ranks")
            assert row["score"] is None
        else:
            assert 0.0 <= row["score"] <= 1.0 and row["epochs"] == 2
            history = [
                json.loads(line)
                for line in (tmp_path / "trials" / f"{row['number']:04d}" / "metrics.jsonl").read_text().splitlines()
            ]
            assert history[-1]["val_accuracy"] == pytest.approx(row["score"])
            assert Path(row["artifact"], "weights.pt").is_file()

    best = max((r for r in result.trials if r["status"] == "complete"), key=lambda r: r["score"])
    assert result.best["number"] == best["number"]
    best_cfg = load_config(result.best_config)
    assert best_cfg.train.lr == best["params"]["train.lr"] and best_cfg.train.precision == "fp32"
    assert best_cfg.train.num_proc == 2 and best_cfg.train.output == f"{tmp_path}/best_model"
    assert [row["status"] for row in json.loads(Path(result.table_json).read_text())] == [
        row["status"] for row in result.trials
    ]
    assert Path(result.table_csv).read_text().count("\n") == 5
    assert Path(result.plot).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.stack
def test_trials_run_concurrently_and_the_best_is_retrained(spark, dataset, tmp_path):
    # About 24 forward passes of 0.2 s: each trial trains for about 5 s, far longer than a worker takes to start.
    cfg = _config(
        dataset,
        tmp_path,
        "tune.method=random",
        "tune.trials=2",
        "tune.parallelism=2",
        "tune.retrain=true",
        "train.model=test_tune_spark:paced_mlp",
        "train.model_args={seconds: 0.2}",
        "tune.space={train.lr: {type: loguniform, low: 1.0e-3, high: 1.0e-1}}",
    )
    result = tune(spark, cfg)

    (a_start, a_end), (b_start, b_end) = (_interval(r) for r in result.trials)
    # Start and end are taken inside the tasks: the two trials trained at the same time, in two processes.
    assert min(a_end, b_end) - max(a_start, b_start) > timedelta(seconds=0.5), result.trials
    assert min(a_end - a_start, b_end - b_start) > timedelta(seconds=4)
    assert result.trials[0]["pid"] != result.trials[1]["pid"]
    assert len({json.dumps(r["params"]) for r in result.trials}) == 2
    retrained = result.retrained
    assert retrained is not None and retrained.epochs_run == 2
    assert Path(retrained.artifact) == tmp_path / "best_model" / "model"


def test_a_diverging_trial_is_cancelled_after_its_first_epoch(spark, dataset, tmp_path):
    # The diverging trial would train 12 epochs of about 1.1 s; Spark kills a cancelled Python task within
    # about 4 s (its monitor's poll plus spark.python.task.killTimeout), far earlier.
    cfg = _config(
        dataset,
        tmp_path,
        "tune.method=grid",
        "tune.parallelism=2",
        "train.epochs=12",
        "train.model=test_tune_spark:paced_mlp",
        "tune.space={train.model_args: {type: choice, values: [{seconds: 0.1, diverge: true}, {seconds: 0.0}]}}",
    )
    result = tune(spark, cfg)

    diverged, fine = sorted(result.trials, key=lambda r: "diverge" in r["params"]["train.model_args"], reverse=True)
    assert diverged["status"] == "failed" and diverged["error"] == "diverged: the metric is nan at step 1"
    assert diverged["artifact"] is None
    written = (tmp_path / "trials" / f"{diverged['number']:04d}" / "metrics.jsonl").read_text().splitlines()
    assert 1 <= len(written) < 12
    assert fine["status"] == "complete" and fine["epochs"] == 12
    # Spark killed the cancelled task's worker; the search went on and its slot serves new trials.
    assert spark.sparkContext.parallelize([1, 2], 2).map(lambda x: x * 2).collect() == [2, 4]


def test_resume_continues_the_study(spark, dataset, tmp_path):
    space = "tune.space={train.lr: {type: loguniform, low: 1.0e-3, high: 1.0e-1}}"
    first = tune(spark, _config(dataset, tmp_path, "tune.method=bayes", "tune.trials=2", "tune.parallelism=1", space))
    assert first.ran == 2
    # A run killed while its trial trained leaves that trial RUNNING in the study.
    study = optuna.load_study(study_name="sparkml_par", storage=storage_url(tmp_path))
    study.ask()

    overrides = [
        f"data.output={dataset}",
        *_DATA,
        *_TRAIN,
        f"tune.output={tmp_path}",
        "tune.method=bayes",
        "tune.trials=3",
        "tune.parallelism=1",
        space,
    ]
    if "tune" in cli.COMMANDS:  # the same run through the CLI, as `sparkml-par tune` runs it
        config = tmp_path / "tune.yaml"
        config.write_text("{}\n")
        assert cli.main(["tune", str(config), *overrides]) == 0
    else:
        tune(spark, load_config(None, overrides))

    rows = json.loads((tmp_path / "trials.json").read_text())
    assert [(r["number"], r["status"]) for r in rows] == [
        (0, "complete"),
        (1, "complete"),
        (2, "stale"),
        (3, "complete"),
    ]
    assert rows[:2] == [{**r, "params": r["params"]} for r in first.trials]
    assert rows[3]["params"]["train.lr"] not in {r["params"]["train.lr"] for r in rows[:2]}
