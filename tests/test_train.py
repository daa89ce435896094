"""The Horovod trainer end to end: real petastorm shards, real barrier stages, real ring all-reduce."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import injected_faults
import pytest
import torch
import torch.nn.functional as F

from data_prep.job import prepare
from sparkml_par.config import load_config
from sparkml_par.errors import SparkmlParError
from sparkml_par.launch import LaunchError
from sparkml_par.models.registry import build_from_spec
from sparkml_par.train.artifact import load_model_artifact
from sparkml_par.train.data import ShardBatches
from sparkml_par.train.job import build_train_job, train
from sparkml_par.train.loop import steps_per_epoch
from sparkml_par.train.preemption import AGREE_SECONDS

# Exact comparisons: plain SGD, no shuffling, no schedule, the learning rate not scaled by the rank count.
EXACT = [
    "train.model=mlp",
    "train.model_args={hidden: [32]}",
    "train.optimizer=sgd",
    "train.momentum=0.0",
    "train.lr=0.1",
    "train.lr_scaling=none",
    "train.shuffle=false",
    "train.num_proc=2",
]


@pytest.fixture(scope="module")
def synthetic(spark, tmp_path_factory):
    """960 train rows of 4 Gaussian classes in 8 row groups: small enough for many runs."""
    root = tmp_path_factory.mktemp("synthetic")
    cfg = load_config(
        None,
        [
            f"data.output={root}/dataset",
            "data.source=synthetic",
            "data.synthetic.rows=1200",
            "data.synthetic.features=8",
            "data.synthetic.classes=4",
            "data.max_shards=4",
        ],
    )
    prepare(spark, cfg.data)
    return root


@pytest.fixture(scope="module")
def digits(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    cfg = load_config("conf/quickstart.yaml", [f"data.output={root}/dataset"])
    prepare(spark, cfg.data)
    return root


def _config(root: Path, name: str, *overrides: str):
    return load_config(None, [f"data.output={root}/dataset", f"train.output={root}/{name}", *overrides])


def _weights(result) -> dict[str, torch.Tensor]:
    return torch.load(Path(result.artifact) / "weights.pt", weights_only=True)


def _assert_same_weights(a: dict, b: dict, tolerance: float) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=tolerance, msg=f"parameter {key}")


def test_two_ranks_equal_one_process_on_the_same_global_batches(spark, synthetic):
    cfg = _config(synthetic, "two_ranks", *EXACT, "train.epochs=2", "train.batch_size=32")
    result = train(spark, cfg)

    # The same model trained in this process on the union of both ranks' batches, in the same order.
    manifest = json.loads((synthetic / "dataset" / "_manifest.json").read_text())
    job = build_train_job(manifest, f"file://{synthetic}/dataset", cfg, 2)
    torch.manual_seed(cfg.train.seed)
    model = build_from_spec(job.model_spec)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = steps_per_epoch(job.split_rows["train"], 32, 1)
    shards = [ShardBatches(job.splits["train"], rank, 2, 16, label=job.label, shuffle=False, seed=0) for rank in (0, 1)]
    for epoch in range(2):
        for (x0, y0), (x1, y1) in zip(shards[0].epoch(epoch, steps), shards[1].epoch(epoch, steps)):
            optimizer.zero_grad()
            F.cross_entropy(model(torch.cat([x0, x1])), torch.cat([y0, y1])).backward()
            optimizer.step()

    assert result.epochs_run == 2
    _assert_same_weights(_weights(result), model.state_dict(), 1e-5)


def test_gradient_accumulation_equals_one_larger_batch(spark, synthetic):
    accumulated = train(
        spark,
        _config(
            synthetic, "accumulated", *EXACT, "train.epochs=1", "train.batch_size=16", "train.accumulation_steps=4"
        ),
    )
    large = train(spark, _config(synthetic, "large", *EXACT, "train.epochs=1", "train.batch_size=64"))
    assert accumulated.history[0]["step"] == large.history[0]["step"] > 1
    _assert_same_weights(_weights(accumulated), _weights(large), 1e-5)


def test_pipeline_split_model_trains_like_the_whole_model(spark, synthetic, caplog):
    whole = train(spark, _config(synthetic, "whole", *EXACT, "train.epochs=1", "train.model_args={hidden: [32, 16]}"))
    caplog.set_level("WARNING", logger="sparkml_par.train")
    split = train(
        spark,
        _config(
            synthetic,
            "split",
            *EXACT,
            "train.epochs=1",
            "train.model_args={hidden: [32, 16]}",
            "train.pipeline_stages=2",
            "train.micro_batches=4",
        ),
    )
    _assert_same_weights(_weights(split), _weights(whole), 1e-5)
    assert "train.pipeline_stages=2 on CPU ranks: the stages share each rank's one device" in caplog.text


def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(spark, synthetic):
    # Shuffling, dropout, momentum and a step schedule: every piece of state must survive the restart.
    common = [
        "train.model=mlp",
        "train.model_args={hidden: [32], dropout: 0.2}",
        "train.optimizer=sgd",
        "train.lr=0.05",
        "train.scheduler=step",
        "train.gamma=0.5",
        "train.batch_size=32",
    ]
    uninterrupted = train(spark, _config(synthetic, "uninterrupted", *common, "train.epochs=4"))
    first_half = train(spark, _config(synthetic, "resumed", *common, "train.epochs=2"))
    assert first_half.epochs_run == 2
    resumed = train(spark, _config(synthetic, "resumed", *common, "train.epochs=4"))
    assert resumed.epochs_run == 4
    assert [r["epoch"] for r in resumed.history] == [1, 2, 3, 4]
    _assert_same_weights(_weights(resumed), _weights(uninterrupted), 1e-6)
    metrics_lines = (synthetic / "resumed" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in metrics_lines] == [1, 2, 3, 4]
    checkpoints = sorted(p.name for p in (synthetic / "resumed" / "checkpoints").iterdir())
    assert checkpoints == ["checkpoint-00002.pt", "checkpoint-00003.pt", "checkpoint-00004.pt"]


RESUMABLE = [*injected_faults.RESUMABLE, "train.epochs=4"]


def _killing(synthetic: Path, **kill) -> str:
    return injected_faults.killing_model_args(synthetic / "dataset", **kill)


def test_a_killed_rank_is_rerun_by_spark_and_resumes_to_the_uninterrupted_weights(spark, synthetic, caplog):
    """Rank 1 SIGKILLs itself once at step 3 of epoch 2 of 4; Spark reruns the barrier stage, which resumes
    from the epoch-1 checkpoint."""
    uninterrupted = train(spark, _config(synthetic, "never-killed", *RESUMABLE, _killing(synthetic)))
    killed_once = _killing(synthetic, kill_rank=1, marker=str(synthetic / "killed-once"))
    with caplog.at_level("WARNING", logger="sparkml_par.launch"):
        rerun = train(spark, _config(synthetic, "killed", *RESUMABLE, killed_once))
    assert (synthetic / "killed-once").exists()
    assert "attempt 1 of 4: rank 1 on host" in caplog.text and "died without raising an error" in caplog.text
    assert rerun.epochs_run == 4 and [r["epoch"] for r in rerun.history] == [1, 2, 3, 4]
    _assert_same_weights(_weights(rerun), _weights(uninterrupted), 1e-6)
    metrics_lines = (synthetic / "killed" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in metrics_lines] == [1, 2, 3, 4]


def test_a_rank_killed_in_every_attempt_names_the_rank_the_epoch_and_the_checkpoint(spark, synthetic):
    with pytest.raises(LaunchError) as failure:
        train(spark, _config(synthetic, "always-killed", *RESUMABLE, _killing(synthetic, kill_rank=1)))
    message = str(failure.value)
    checkpoint = synthetic / "always-killed" / "checkpoints" / "checkpoint-00001.pt"
    assert message.startswith(
        f"training failed in epoch 2 of 4; the newest checkpoint is {checkpoint}: "
        f"`sparkml-par train` with the same config resumes from it."
    )
    assert "rank 1 on host" in message and "died without raising an error" in message
    assert "in attempt 4 of 4 (spark.stage.maxConsecutiveAttempts)" in message
    assert failure.value.rank == 1


def test_a_rank_killed_mid_epoch_resumes_at_its_step_checkpoint_to_the_uninterrupted_weights(spark, synthetic, caplog):
    """Rank 1 SIGKILLs itself once at step 5 of epoch 2 of 4; Spark reruns the stage, which continues from the
    step checkpoint 4 batches into epoch 2 (a checkpoint every 2 steps), not from the epoch-1 checkpoint."""
    uninterrupted = train(spark, _config(synthetic, "never-killed-steps", *RESUMABLE, _killing(synthetic)))
    killed_once = _killing(synthetic, kill_rank=1, step=5, marker=str(synthetic / "killed-mid-epoch"))
    with caplog.at_level("INFO"):
        rerun = train(
            spark, _config(synthetic, "killed-steps", *RESUMABLE, "train.checkpoint_every_steps=2", killed_once)
        )
    steps = steps_per_epoch(injected_faults.train_rows(synthetic / "dataset"), 32, 1)
    checkpoint = synthetic / "killed-steps" / "checkpoints" / "checkpoint-00001-000004.pt"
    assert f"resumed from checkpoint epoch 1, 4 of {steps} batches into epoch 2 ({checkpoint})" in caplog.text
    assert [r["epoch"] for r in rerun.history] == [1, 2, 3, 4]
    assert [r["samples"] for r in rerun.history] == [r["samples"] for r in uninterrupted.history] == [steps * 32] * 4
    _assert_same_weights(_weights(rerun), _weights(uninterrupted), 1e-6)
    for ours, theirs in zip(rerun.history, uninterrupted.history):
        assert ours["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-6)


@pytest.fixture(scope="module")
def uninterrupted(spark, synthetic):
    """The 4 epochs of RESUMABLE training that no signal interrupts: the weights an interrupted run must end with."""
    return train(spark, _config(synthetic, "never-stopped", *RESUMABLE, _killing(synthetic)))


def test_sigterm_stops_every_rank_at_a_checkpoint_and_training_goes_on_to_the_same_weights(
    spark, synthetic, uninterrupted, caplog
):
    """Rank 1 is sent SIGTERM once, in step 5 of epoch 2 of 4, in steps as long as the ranks' agreement
    interval, so they agree after every step: they learn of it after the next step (the agreement runs beside
    a step) and stop there with a checkpoint, the driver launches them again from it, and the run ends with the
    uninterrupted run's weights."""
    stopped_once = _killing(
        synthetic,
        kill_rank=1,
        step=5,
        marker=str(synthetic / "stopped"),
        signal_name="SIGTERM",
        step_seconds=AGREE_SECONDS,
    )
    with caplog.at_level("INFO"):
        resumed = train(spark, _config(synthetic, "preempted", *RESUMABLE, stopped_once))
    steps = steps_per_epoch(injected_faults.train_rows(synthetic / "dataset"), 32, 1)
    checkpoint = synthetic / "preempted" / "checkpoints" / "checkpoint-00001-000006.pt"
    stopped = re.search(
        rf"SIGTERM: every rank stopped after step {steps + 6}; checkpoint {checkpoint} on disk "
        r"([0-9.]+) s after the signal",
        caplog.text,
    )
    assert stopped and float(stopped.group(1)) < 60
    assert f"stopped after step {steps + 6} (SIGTERM) at a checkpoint: training goes on with 2 ranks" in caplog.text
    assert [r["epoch"] for r in resumed.history] == [1, 2, 3, 4]
    (event,) = resumed.interruptions
    assert {
        k: event[k] for k in ("reason", "epoch", "ranks_before", "ranks_after", "steps_repeated", "checkpoint")
    } == {
        "reason": "preempted",
        "epoch": 2,
        "ranks_before": 2,
        "ranks_after": 2,
        "steps_repeated": 0,
        "checkpoint": str(checkpoint),
    }
    metrics = [json.loads(line) for line in (synthetic / "preempted" / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("interruptions") for r in metrics] == [None, [event], None, None]
    _assert_same_weights(_weights(resumed), _weights(uninterrupted), 1e-6)


def test_sigterm_in_short_steps_stops_every_rank_at_the_next_agreement(spark, synthetic, uninterrupted, caplog):
    """Steps a tenth of the agreement interval: the ranks agree about every 10 steps, not after each, so a
    SIGTERM in step 5 of epoch 2 stops every rank at one step up to 11 steps later, with a checkpoint there,
    and the run still ends with the uninterrupted run's weights."""
    stopped_once = _killing(
        synthetic,
        kill_rank=1,
        step=5,
        marker=str(synthetic / "stopped-short-steps"),
        signal_name="SIGTERM",
        step_seconds=AGREE_SECONDS / 10,
    )
    with caplog.at_level("INFO"):
        resumed = train(spark, _config(synthetic, "preempted-short-steps", *RESUMABLE, stopped_once))
    steps = steps_per_epoch(injected_faults.train_rows(synthetic / "dataset"), 32, 1)
    stopped = re.search(r"SIGTERM: every rank stopped after step (\d+); checkpoint (\S+) on disk", caplog.text)
    assert stopped, caplog.text[-2000:]
    step = int(stopped.group(1))
    assert steps + 6 <= step <= steps + 16
    epoch, position = divmod(step, steps)
    name = f"checkpoint-{epoch:05d}-{position:06d}.pt" if position else f"checkpoint-{epoch:05d}.pt"
    assert stopped.group(2) == str(synthetic / "preempted-short-steps" / "checkpoints" / name)
    assert [r["epoch"] for r in resumed.history] == [1, 2, 3, 4]
    (event,) = resumed.interruptions
    assert (event["reason"], event["steps_repeated"], event["ranks_after"]) == ("preempted", 0, 2)
    _assert_same_weights(_weights(resumed), _weights(uninterrupted), 1e-6)


def test_two_streams_on_one_rank_train_like_two_ranks(spark, synthetic):
    """The train split read as 2 streams by 1 rank (a run shrunk from 2 ranks to 1): every step trains on the
    rows the 2 ranks' step trains on, with the same gradient, so the weights are those of the 2-rank run."""
    from sparkml_par.launch import Launcher
    from sparkml_par.train.loop import train_rank

    cfg = _config(synthetic, "two-ranks", *EXACT, "train.epochs=2", "train.batch_size=64")
    two_ranks = train(spark, cfg)
    manifest = json.loads((synthetic / "dataset" / "_manifest.json").read_text())
    job = build_train_job(manifest, f"file://{synthetic / 'dataset'}", cfg, 2)
    one_rank = replace(job, output=str(synthetic / "two-streams-one-rank"))
    # A local launch: under a barrier one the rank would see the second slot of local[2] and grow back to 2.
    (result,) = Launcher(num_proc=1, mode="local", timeout=600).run(train_rank, one_rank)
    assert [r["ranks"] for r in result["history"]] == [1, 1]
    assert [r["samples"] for r in result["history"]] == [r["samples"] for r in two_ranks.history]
    weights = torch.load(Path(result["artifact"]) / "weights.pt", weights_only=True)
    _assert_same_weights(weights, _weights(two_ranks), 1e-6)


def test_early_stopping_stops_every_rank_at_the_same_epoch(spark, synthetic):
    # No change can beat min_delta, so the second epoch is the last one with patience 1.
    cfg = _config(
        synthetic,
        "early",
        "train.model=mlp",
        "train.epochs=6",
        "train.early_stopping.patience=1",
        "train.early_stopping.min_delta=100",
    )
    result = train(spark, cfg)
    assert result.epochs_run == 2
    assert result.stopped_early


def test_resume_refuses_a_checkpoint_of_another_model(spark, synthetic):
    train(spark, _config(synthetic, "other_model", "train.model=mlp", "train.epochs=1"))
    with pytest.raises(SparkmlParError, match="checkpoint.*other_model/checkpoints/checkpoint-00001.pt"):
        train(
            spark,
            _config(synthetic, "other_model", "train.model=mlp", "train.model_args={hidden: [8]}", "train.epochs=2"),
        )


def test_more_ranks_than_row_groups_is_refused_before_launch(spark, synthetic):
    manifest = json.loads((synthetic / "dataset" / "_manifest.json").read_text())
    cfg = _config(synthetic, "too_many")
    with pytest.raises(
        SparkmlParError,
        match=r"train.num_proc=8 but the train split of .* has only 4 row groups, "
        r"so some ranks would read nothing; lower train.num_proc, or re-shard "
        r"the dataset with data.max_shards=8",
    ):
        build_train_job(manifest, f"file://{synthetic}/dataset", cfg, 8)


def test_a_monitor_no_rank_reports_is_refused_before_launch(spark, synthetic):
    manifest = json.loads((synthetic / "dataset" / "_manifest.json").read_text())
    cfg = _config(synthetic, "monitor", "train.early_stopping.patience=2", "train.early_stopping.monitor=val_acc")
    with pytest.raises(
        SparkmlParError,
        match=r"^train.early_stopping.monitor: 'val_acc' is not a metric of this run; "
        r"choose one of train_loss, train_accuracy, val_loss, val_accuracy, lr",
    ):
        build_train_job(manifest, f"file://{synthetic}/dataset", cfg, 2)
    # Without a validation split of a row per rank, the val_* metrics are not reported, and the error says so.
    small = {
        **manifest,
        "splits": {**manifest["splits"], "validation": {**manifest["splits"]["validation"], "rows": 1}},
    }
    with pytest.raises(
        SparkmlParError,
        match=r"'val_loss' is not a metric of this run \(the dataset's validation "
        r"split has fewer rows than ranks",
    ):
        build_train_job(
            small, f"file://{synthetic}/dataset", _config(synthetic, "monitor", "train.early_stopping.patience=2"), 2
        )


def test_missing_dataset_is_named(spark, tmp_path):
    with pytest.raises(SparkmlParError, match=r"no dataset at data.output=.*nowhere.*run `sparkml-par prepare`"):
        train(spark, load_config(None, [f"data.output={tmp_path}/nowhere"]))


@pytest.mark.slow
def test_digits_cnn_on_two_ranks_reaches_95_percent(spark, digits):
    result = train(spark, _config(digits, "cnn", "train.model=cnn", "train.epochs=5", "train.num_proc=2"))
    assert result.test["accuracy"] >= 0.95
    model, description = load_model_artifact(result.artifact)
    assert description["spec"]["name"] == "cnn" and description["num_classes"] == 10
    history = [json.loads(line) for line in (digits / "cnn" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in history] == [1, 2, 3, 4, 5]
    assert all(r["samples_per_sec"] > 0 and "val_accuracy" in r for r in history)
