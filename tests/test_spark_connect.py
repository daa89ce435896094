"""A Spark Connect session (pyspark-client, Databricks serverless and standard access mode, `spark.remote`) has no
SparkContext: every stage refuses it with one error before any work, naming the session kind and the fix.

The session is a real one: pyspark >= 4 ships the Connect server, and `SparkSession.builder.remote("local[1]")`
starts it in a JVM of its own. It runs in a subprocess, beside no classic session.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyspark
import pytest

pytestmark = pytest.mark.stack

CONNECT_CLIENT = ("grpc", "google.rpc", "pyarrow", "pandas")


@pytest.mark.skipif(int(pyspark.__version__.split(".")[0]) < 4, reason="the Connect server ships with pyspark >= 4")
def test_every_stage_refuses_a_spark_connect_session_before_any_work(tmp_path):
    for module in CONNECT_CLIENT:
        pytest.importorskip(module, reason="pyspark[connect]'s client packages (the test extra installs them)")
    script = textwrap.dedent(
        f"""
        import os, sys
        from pyspark.sql import SparkSession
        from sparkml_par.config import load_config
        from sparkml_par.errors import SparkmlParError
        from data_prep.job import prepare
        from sparkml_par.train.job import train
        from sparkml_par.infer.score import score_job
        from sparkml_par.tune.job import tune

        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        spark = SparkSession.builder.remote("local[1]").getOrCreate()
        cfg = load_config(None, ["data.source=synthetic", "data.output={tmp_path}/dataset",
                                 "train.output={tmp_path}/model", "tune.output={tmp_path}/tune",
                                 "score.output={tmp_path}/predictions"])
        try:
            for stage, run in [("prepare", lambda: prepare(spark, cfg.data)), ("train", lambda: train(spark, cfg)),
                               ("score", lambda: score_job(spark, cfg)), ("tune", lambda: tune(spark, cfg))]:
                try:
                    run()
                except SparkmlParError as exc:
                    print(f"{{stage}}|{{exc}}")
        finally:
            spark.stop()
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    errors = dict(line.split("|", 1) for line in result.stdout.splitlines() if "|" in line)
    assert sorted(errors) == ["prepare", "score", "train", "tune"]
    for stage, message in errors.items():
        assert message.startswith(
            f"{stage} needs a classic Spark session, and this one is a Spark Connect session "
            "(pyspark.sql.connect.session.SparkSession)"
        )
        assert "dedicated (single user) access mode" in message and "spark.remote / SPARK_REMOTE" in message
    assert not (tmp_path / "dataset").exists() and not (tmp_path / "model").exists()
