"""`sparkml-par run`: every stage once, then skips, forced re-runs and the run directory's contents."""

from __future__ import annotations

import json

import pytest
from run_settings import tiny_job

from sparkml_par.config import load_config
from sparkml_par.pipeline import run_pipeline

TINY = [*tiny_job(rows=400, epochs=2)]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("pipeline")


def _config(run_dir, *overrides):
    return load_config(
        None,
        [
            *TINY,
            f"output.run_dir={run_dir}",
            f"data.output={run_dir}/dataset",
            f"train.output={run_dir}/model",
            f"score.output={run_dir}/predictions",
            f"tune.output={run_dir}/tune",
            *overrides,
        ],
    )


@pytest.mark.stack
def test_first_run_runs_every_stage_and_fills_the_run_directory(spark, run_dir):
    records = run_pipeline(spark, _config(run_dir))
    assert list(records) == ["prepare", "train", "score", "report"]
    assert not any(r.summary.get("skipped") for r in records.values())
    assert (run_dir / "model" / "model" / "weights.pt").is_file()
    assert (run_dir / "predictions" / "_metrics.json").is_file()
    assert (run_dir / "report" / "index.html").is_file()
    assert "train:" in (run_dir / "config.yaml").read_text()
    stages = json.loads((run_dir / "stages.json").read_text())
    assert set(stages) == {"prepare", "train", "score", "report"}
    assert records["score"].summary["metrics"]["accuracy"] > 0.5


def test_second_run_skips_every_unchanged_stage(spark, run_dir):
    weights = (run_dir / "model" / "model" / "weights.pt").stat().st_mtime_ns
    records = run_pipeline(spark, _config(run_dir))
    assert records["prepare"].summary["skipped"]
    assert records["train"].summary.get("skipped") and records["score"].summary.get("skipped")
    assert (run_dir / "model" / "model" / "weights.pt").stat().st_mtime_ns == weights


def test_changed_train_config_retrains_and_rescores_only(spark, run_dir):
    records = run_pipeline(spark, _config(run_dir, "train.epochs=3"))
    assert records["prepare"].summary["skipped"]
    assert not records["train"].summary.get("skipped") and records["train"].summary["epochs_run"] == 3
    assert not records["score"].summary.get("skipped")


def test_from_stage_forces_that_stage_and_the_later_ones(spark, run_dir):
    records = run_pipeline(spark, _config(run_dir, "train.epochs=3", "output.from_stage=score"))
    assert records["train"].summary.get("skipped")
    assert not records["score"].summary.get("skipped")
    # The run state, which the report's stages table shows, says what this run did.
    stages = json.loads((run_dir / "stages.json").read_text())
    assert stages["train"]["summary"]["skipped"] and stages["train"]["seconds"] == 0.0
    assert not stages["score"]["summary"].get("skipped")


@pytest.mark.parametrize("description", ["prepare: profile", None])
def test_spark_progress_names_the_active_stage_as_its_job_is_named(spark, description):
    import threading

    from sparkml_par.progress import describe_active_stages
    from sparkml_par.spark_runtime.spark_jobs import open_groups, spark_job

    sc = spark.sparkContext
    seen = []
    done = threading.Event()

    def watch():
        tracker = sc.statusTracker()
        while not done.is_set() and not seen:
            line = describe_active_stages(tracker, open_groups())
            if line:
                seen.append(line)
            done.wait(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    slow = sc.parallelize(range(4), 4).map(lambda x: __import__("time").sleep(1.5) or x)
    if description:
        with spark_job(sc, description):
            assert sc.getLocalProperty("spark.job.description") == description  # what Spark's UI shows
            slow.collect()
        assert sc.getLocalProperty("spark.job.description") is None and open_groups() == {}
    else:
        slow.collect()
    done.set()
    watcher.join()
    assert seen and "/4 tasks" in seen[0]
    assert seen[0].startswith(f"{description}: 0/4 tasks" if description else "stage ")
