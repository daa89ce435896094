"""The jobs/ scripts under a real spark-submit, on local[2] and on separate executor JVMs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from run_settings import tiny_job

ROOT = Path(__file__).parents[1]
TINY = [*tiny_job(rows=300, epochs=1)]


def _spark_submit(master: str, script: str, *args: str) -> subprocess.CompletedProcess:
    spark_submit = Path(sys.executable).with_name("spark-submit")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(
        [
            str(spark_submit),
            "--master",
            master,
            "--conf",
            "spark.driver.host=127.0.0.1",
            "--conf",
            "spark.ui.enabled=false",
            str(ROOT / "jobs" / script),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env=env,
    )


@pytest.mark.slow
@pytest.mark.stack
# local[2] under spark-submit, from a plain shell: tests/test_console.py.
@pytest.mark.parametrize("master", ["local-cluster[2,1,1024]"])
def test_pipeline_job_runs_under_spark_submit(master, tmp_path):
    run = tmp_path / "run"
    done = _spark_submit(
        master,
        "pipeline.py",
        "--config",
        str(ROOT / "conf/quickstart.yaml"),
        *TINY,
        f"output.run_dir={run}",
        f"data.output={run}/dataset",
        f"train.output={run}/model",
        f"score.output={run}/predictions",
        f"tune.output={run}/tune",
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "test accuracy" in done.stdout
    stages = json.loads((run / "stages.json").read_text())
    assert set(stages) == {"prepare", "train", "score", "report"}
    assert (run / "model" / "model" / "weights.pt").is_file()
    assert (run / "report" / "index.html").is_file()


@pytest.mark.slow
def test_a_user_error_exits_non_zero_with_the_message(tmp_path):
    done = _spark_submit(
        "local[2]", "train.py", "--config", str(ROOT / "conf/quickstart.yaml"), f"data.output={tmp_path}/missing"
    )
    assert done.returncode == 2
    # spark-submit's PythonRunner merges the script's stderr into its stdout; the job points it back.
    assert "error: no dataset at data.output=" in done.stderr
    assert "error:" not in done.stdout
