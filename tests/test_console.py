"""What a user's console shows: the `sparkml-par` CLI and spark-submit as subprocesses, their output read back.

A normal run prints the project's lines and no warning; a failing rank gives one error block, first; an
output that cannot be written is one error before any Spark job; spark-submit works from a plain shell.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch.nn as nn
from run_settings import outputs_under

from sparkml_par.contract import RUN_LOG

ROOT = Path(__file__).parents[1]
VENV_BIN = Path(sys.executable).parent
# The JVM itself announces the incubator module Spark 4 enables, before any logging exists: the banner.
JVM_BANNER = "WARNING: Using incubator modules: jdk.incubator.vector"
JAVA_FRAME = re.compile(r"^\s+at [\w$.]+\(", re.MULTILINE)
PYTHON_WARNING = re.compile(r"\b\w+Warning\b")


def diverging_model(input_shape, num_outputs):
    """A model whose fourth forward pass raises, as a user's model with a bug would (train.model import path)."""
    return _Diverging(math.prod(input_shape), num_outputs)


class _Diverging(nn.Module):
    def __init__(self, inputs: int, outputs: int):
        super().__init__()
        self.linear = nn.Linear(inputs, outputs)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 3:
            raise RuntimeError("loss became NaN in the user's model")
        return self.linear(x.flatten(1))


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VENV_BIN / "sparkml-par"), *args], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env
    )


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory):
    """The quickstart config as a user runs it (one epoch): its console output, and its run directory.

    With an empty matplotlib config directory, as on a first run, so the report builds its font cache."""
    root = tmp_path_factory.mktemp("quickstart")
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path_factory.mktemp("matplotlib"))}
    done = _cli("run", "conf/quickstart.yaml", "train.epochs=1", *outputs_under(root), env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    return done, root


@pytest.mark.slow
def test_a_normal_run_prints_the_projects_lines_and_no_warning(quickstart_run):
    done, root = quickstart_run
    console = done.stdout + done.stderr
    assert not PYTHON_WARNING.search(console), console
    assert not JAVA_FRAME.search(console), console
    others = [
        line
        for line in done.stderr.splitlines()
        if line != JVM_BANNER and not re.match(r"\d\d:\d\d:\d\d (INFO|WARNING) (sparkml_par|data_prep)", line)
    ]
    assert others == []
    assert "test accuracy" in done.stdout and f"run directory {root}" in done.stdout


@pytest.mark.slow
def test_a_failing_rank_prints_one_error_block_first(quickstart_run, tmp_path):
    _, quickstart = quickstart_run
    done = _cli(
        "run",
        "conf/quickstart.yaml",
        "train.epochs=1",
        "train.model=test_console:diverging_model",
        *outputs_under(tmp_path),
        f"data.output={quickstart}/dataset",
    )
    assert done.returncode == 2, done.stderr[-4000:]
    lines = done.stderr.splitlines()
    first_error = next(i for i, line in enumerate(lines) if line.startswith("error: "))
    assert lines[first_error].startswith("error: training failed in epoch 1 of 1")
    assert not any("Traceback" in line or " ERROR " in line or " WARN " in line for line in lines[:first_error])
    block = "\n".join(lines[first_error:])
    assert "RuntimeError: loss became NaN in the user's model" in block
    assert done.stderr.count("Traceback (most recent call last)") == 1
    assert "SPARKML_PAR_RANK_FAILURE" not in done.stderr and not JAVA_FRAME.search(done.stderr)
    # Spark's own reports of the stage's tasks are kept, in the run's log: the failures, or the kills when the
    # driver cancelled the stage first.
    assert "WARN org.apache.spark.scheduler.TaskSetManager: Lost task" in (tmp_path / RUN_LOG).read_text()
    assert "Lost task" not in done.stderr


@pytest.mark.parametrize("setting", ["output.run_dir", "train.output", "score.output"])
def test_an_unwritable_output_is_one_error_before_any_work(setting, tmp_path):
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("not a directory\n")
    bad = f"{in_the_way}/{setting.replace('.', '_')}"
    done = _cli("run", "conf/quickstart.yaml", *outputs_under(tmp_path / "run"), f"{setting}={bad}")
    assert done.returncode == 2
    assert done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if line != JVM_BANNER]
    assert len(errors) == 1 and errors[0].startswith(f"error: cannot write to {setting} '{bad}'")
    assert errors[0].endswith(f"set {setting} to a place you can create files in")
    assert not (tmp_path / "run" / "dataset").exists()  # nothing was prepared


@pytest.mark.slow
def test_the_readme_spark_submit_command_runs_from_a_plain_shell(tmp_path):
    """`.venv/bin/sparkml-par-submit --master local[2] jobs/pipeline.py --config CONF` without the venv on PATH."""
    plain = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    root = tmp_path / "run"
    done = subprocess.run(
        [
            str(VENV_BIN / "sparkml-par-submit"),
            "--master",
            "local[2]",
            "jobs/pipeline.py",
            "--config",
            "conf/quickstart.yaml",
            "data.source=synthetic",
            "data.synthetic.rows=300",
            "data.synthetic.features=8",
            "data.max_shards=2",
            "train.model=mlp",
            "train.epochs=1",
            *outputs_under(root),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=plain,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    # The summary on stdout, every log line on stderr: spark-submit's merge of the two is undone.
    assert done.stdout.splitlines()[0] == f"run directory {root}"
    assert "test accuracy" in done.stdout and " INFO " not in done.stdout
    assert "INFO sparkml_par.pipeline: [1/4] prepare ..." in done.stderr
    assert " INFO SparkContext" not in done.stderr  # the driver JVM started with the project's log config
    assert (root / "model" / "model" / "weights.pt").is_file()


def test_sparks_own_task_failures_still_reach_the_console(tmp_path):
    """Only the project's rank failures are kept out of the console; any other failed task is Spark's to report."""
    script = tmp_path / "job.py"
    script.write_text(
        "from sparkml_par.config import SparkConfig\n"
        "from sparkml_par.spark_runtime.session import spark_session\n"
        "with spark_session(SparkConfig(master='local[1]')) as spark:\n"
        "    try:\n"
        "        spark.sparkContext.parallelize([1, 0], 1).map(lambda x: 1 / x).collect()\n"
        "    except Exception:\n"
        "        print('job failed')\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "job failed\n", done.stderr[-4000:]
    lost = [line for line in done.stderr.splitlines() if " WARN TaskSetManager: Lost task 0.0 in stage 0.0" in line]
    assert len(lost) == 1 and "PythonException" in lost[0]
    assert "ZeroDivisionError: division by zero" in done.stderr
    assert " ERROR Executor: Exception in task" not in done.stderr  # local[N]'s copy of the same report
