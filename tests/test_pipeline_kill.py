"""`sparkml-par run` killed outright (SIGKILL to the driver, its JVM and workers) in each stage, then run again.

The re-run must finish, skip what was complete, leave nothing half-published, and end with the same
model and predictions as a run that was never interrupted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from run_settings import outputs_under, tiny_job

from sparkml_par.config import load_config
from sparkml_par.pipeline import run_pipeline

# Six epochs so that a kill after the first checkpoint lands in the middle of training.
SETTINGS = [*tiny_job(rows=600, epochs=6), "spark.master=local[2]", "train.optimizer=sgd", "train.lr=0.05"]
CLI = [str(Path(sys.executable).parent / "sparkml-par"), "run"]


def _kill_when(run_dir: Path, stage: str) -> bool:
    """True once the killed run is in the middle of `stage`."""
    log = run_dir / "run.log"
    text = log.read_text() if log.exists() else ""
    if stage == "prepare":
        return any((p / "train").is_dir() for p in run_dir.glob("dataset.tmp-*"))
    if stage == "train":
        return (run_dir / "model" / "checkpoints" / "checkpoint-00001.pt").exists()
    return f"] {stage} ..." in text


@pytest.fixture(scope="module")
def clean(spark, tmp_path_factory):
    """The same pipeline run once without interruption, in the test's own session."""
    run_dir = tmp_path_factory.mktemp("clean")
    run_pipeline(spark, load_config(None, [*SETTINGS, "train.seed=7", *outputs_under(run_dir)]))
    return run_dir


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "model" / "model" / "weights.pt", weights_only=True)


def _predictions(run_dir: Path):
    return pq.read_table(run_dir / "predictions").to_pandas().sort_values("_row_id").reset_index(drop=True)


@pytest.mark.parametrize("stage", ["prepare", "train", "score", "report"])
def test_a_run_killed_in_a_stage_reruns_to_the_outputs_of_a_clean_run(clean, tmp_path, stage):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    conf = tmp_path / "conf.yaml"
    conf.write_text("train:\n  seed: 7\n")
    command = [*CLI, str(conf), *SETTINGS, *outputs_under(run_dir)]
    with open(tmp_path / "killed.log", "wb") as out:
        killed = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 240
        while not _kill_when(run_dir, stage) and killed.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert killed.poll() is None, (
            f"the run ended before it reached {stage}:\n{(tmp_path / 'killed.log').read_text()}"
        )
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
    # Nothing that looks complete was published by the killed stage.
    published = {
        "prepare": run_dir / "dataset" / "_manifest.json",
        "train": run_dir / "model" / "model",
        "score": run_dir / "predictions" / "_metrics.json",
        "report": run_dir / "report" / "index.html",
    }
    assert not published[stage].exists()

    rerun = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    lines = {line.split()[0]: line for line in rerun.stdout.splitlines() if line.startswith("  ")}
    stages = ["prepare", "train", "score"]
    for done in stages[: stages.index(stage) if stage in stages else 3]:
        assert lines[done].endswith("(skipped: unchanged)"), rerun.stdout
    if stage in stages:
        assert not lines[stage].endswith("(skipped: unchanged)")
    if stage == "train":
        assert "resumed from checkpoint epoch" in (run_dir / "run.log").read_text()

    for key, value in _weights(clean).items():
        torch.testing.assert_close(_weights(run_dir)[key], value, rtol=0, atol=1e-6, msg=f"parameter {key}")
    ours, theirs = _predictions(run_dir), _predictions(clean)
    assert ours["_row_id"].tolist() == theirs["_row_id"].tolist()
    assert ours["prediction"].tolist() == theirs["prediction"].tolist()
    np.testing.assert_allclose(np.stack(ours["probabilities"]), np.stack(theirs["probabilities"]), atol=1e-6)
    assert (run_dir / "report" / "index.html").is_file()
    assert not list(run_dir.glob("*.tmp-*")) and not list(run_dir.glob("*.old-*"))
