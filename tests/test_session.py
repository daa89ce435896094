"""The session builder against a real local SparkSession (the shared one from conftest)."""

from __future__ import annotations

import logging
import sys
import time

import pytest

from sparkml_par.config import SparkConfig
from sparkml_par.errors import ConfigError
from sparkml_par.spark_runtime.session import (
    LOOPBACK,
    SPARK_LOG_CONFIG,
    _cancel_and_await_tasks,
    get_or_create_session,
    running_tasks,
    session_settings,
    spark_session,
    use_driver_log_config,
)
from sparkml_par.spark_runtime.spark_jobs import BackgroundJob


def test_embedded_default_binds_to_loopback(spark):
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.host") == LOOPBACK == "127.0.0.1"
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert conf.get("spark.ui.enabled") == "false"


def test_user_spark_settings_reach_the_live_session(spark, spark_config):
    # The user's spark.sql.shuffle.partitions=2 wins over the project's default of 8.
    assert session_settings(SparkConfig())["spark.sql.shuffle.partitions"] == "8"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.sparkContext.appName == spark_config.app_name == "sparkml_par-tests"


def test_column_functions_skip_pyspark_call_site_capture(spark):
    errors = pytest.importorskip("pyspark.errors.utils")
    if not hasattr(errors, "is_debugging_enabled"):
        pytest.skip("pyspark < 4.0 captures no call sites")
    is_debugging_enabled = errors.is_debugging_enabled

    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    assert is_debugging_enabled() is False
    mine = session_settings(SparkConfig(conf={"spark.python.sql.dataFrameDebugging.enabled": "true"}))
    assert mine["spark.python.sql.dataFrameDebugging.enabled"] == "true"


def test_active_session_is_reused_and_left_running(spark, caplog):
    with caplog.at_level(logging.INFO, logger="sparkml_par.spark_runtime.session"):
        session, created = get_or_create_session(
            SparkConfig(master="local[3]", conf={"spark.sql.shuffle.partitions": "5"})
        )
    assert session is spark and created is False
    assert caplog.messages == [
        "reusing the active Spark session (master local[2]); "
        "not applied: spark.master=local[3], spark.sql.shuffle.partitions=5"
    ]
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sparkml_par.spark_runtime.session"):
        get_or_create_session(SparkConfig(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}))
    assert caplog.messages == []  # what was asked for is what the session has

    with spark_session(SparkConfig()) as inside:
        assert inside is spark
    assert not spark.sparkContext._jsc.sc().isStopped()
    assert spark.range(5).count() == 5


def test_gpu_settings_on_one_machine_use_local_cluster_workers():
    settings = session_settings(
        SparkConfig(
            master="local-cluster[1,2,1024]",
            use_gpu=True,
            gpus_per_executor=2,
            gpu_discovery_script="/opt/spark/getGpus.sh",
        )
    )
    assert settings["spark.executor.resource.gpu.amount"] == "2"
    assert settings["spark.task.resource.gpu.amount"] == "1"
    assert settings["spark.executor.resource.gpu.discoveryScript"] == "/opt/spark/getGpus.sh"
    # local-cluster workers discover the GPUs and lend them to their executors.
    assert settings["spark.worker.resource.gpu.amount"] == "2"
    assert settings["spark.worker.resource.gpu.discoveryScript"] == "/opt/spark/getGpus.sh"


def test_gpus_on_local_master_are_refused():
    with pytest.raises(
        ConfigError,
        match=r"spark.use_gpu: Spark's local\[2\] master runs tasks in the driver "
        r"and cannot assign GPUs to them; use spark.master=local-cluster",
    ):
        session_settings(SparkConfig(master="local[2]", use_gpu=True))


def test_gpu_settings_on_a_cluster_leave_the_driver_and_network_alone():
    settings = session_settings(
        SparkConfig(master="spark://head:7077", use_gpu=True, gpu_discovery_script="/opt/spark/getGpus.sh")
    )
    assert settings["spark.executor.resource.gpu.amount"] == "1"
    assert settings["spark.task.resource.gpu.amount"] == "1"
    assert not any(key.startswith("spark.driver.") for key in settings)
    assert "spark.pyspark.python" not in settings


def test_no_gpu_settings_without_use_gpu():
    settings = session_settings(SparkConfig(master="local[2]"))
    assert not any(".resource.gpu." in key for key in settings)
    assert settings["spark.pyspark.python"] == sys.executable


def test_user_settings_win_over_the_project_defaults():
    settings = session_settings(
        SparkConfig(
            master="local-cluster[1,2,1024]",
            use_gpu=True,
            conf={"spark.ui.enabled": "true", "spark.task.resource.gpu.amount": "0.5"},
        )
    )
    assert settings["spark.ui.enabled"] == "true"
    assert settings["spark.task.resource.gpu.amount"] == "0.5"


def test_python_functions_share_sql_simplified_tracebacks_unless_the_user_turned_them_off():
    assert session_settings(SparkConfig())["spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK"] == "1"
    off = {"spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false"}
    assert "spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK" not in session_settings(SparkConfig(conf=off))


def test_the_driver_starts_with_the_projects_log_config_unless_the_user_or_cluster_has_one(tmp_path):
    ours = f"-Dlog4j2.configurationFile={SPARK_LOG_CONFIG.as_uri()}"
    env = {"SPARK_SUBMIT_OPTS": "-Xss4m"}
    use_driver_log_config(env)
    assert env["SPARK_SUBMIT_OPTS"] == f"-Xss4m {ours}"
    own = {"SPARK_SUBMIT_OPTS": "-Dlog4j2.configurationFile=file:///etc/spark/mine.properties"}
    use_driver_log_config(own)
    assert own == {"SPARK_SUBMIT_OPTS": "-Dlog4j2.configurationFile=file:///etc/spark/mine.properties"}
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "log4j2.properties").write_text("rootLogger.level = info\n")  # a cluster's own
    for cluster in ({"SPARK_CONF_DIR": str(tmp_path / "conf")}, {"SPARK_HOME": str(tmp_path)}):
        unchanged = dict(cluster)
        use_driver_log_config(cluster)
        assert cluster == unchanged


# A job whose one task needs a 1 GB string in a driver JVM of 600 MB.
_OUT_OF_HEAP = """
from sparkml_par.config import SparkConfig
from sparkml_par.errors import SparkmlParError
from sparkml_par.spark_runtime.session import spark_session

try:
    with spark_session(SparkConfig(master="local[2]")) as spark:
        spark.range(1).selectExpr("length(repeat('x', CAST(id + 1000000000 AS INT)))").collect()
except SparkmlParError as exc:
    print("ERROR", exc)
"""


def test_a_driver_jvm_out_of_heap_is_one_clear_error():
    """Spark's driver JVM exits on an OutOfMemoryError in a task; pyspark then only sees a lost connection."""
    import os
    import subprocess

    env = {**os.environ, "SPARK_DRIVER_MEMORY": "600m"}
    env.pop("SPARK_CONF_DIR", None)
    result = subprocess.run([sys.executable, "-c", _OUT_OF_HEAP], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (error,) = [line for line in result.stdout.splitlines() if line.startswith("ERROR ")]
    assert error == (
        "ERROR Spark's driver JVM ran out of heap (java.lang.OutOfMemoryError, exit code 52) and exited (on a "
        "local master it also runs every task); give it a bigger heap with spark.conf.spark.driver.memory "
        "(e.g. spark.conf.spark.driver.memory=8g)"
    )
    assert "Py4JNetworkError" not in result.stderr  # no failed stop() of the dead JVM after it


# A driver JVM that stops answering under the job and exits only after the wait for a dying driver: its
# gateway server shut down at once, its process ended 5 s after that wait by closing its stdin (Spark's
# gateway exits on EOF there), as a loaded machine's slow shutdown hooks would.
_SLOW_EXIT = """
import threading
from pyspark import SparkContext
from sparkml_par.config import SparkConfig
from sparkml_par.errors import SparkmlParError
from sparkml_par.spark_runtime.session import _EXIT_WAIT_S, spark_session

try:
    with spark_session(SparkConfig(master="local[1]")) as spark:
        gateway = SparkContext._gateway
        gateway.shutdown()
        threading.Timer(_EXIT_WAIT_S + 5, gateway.proc.stdin.close).start()
        spark.range(1).count()
except SparkmlParError as exc:
    print("ERROR", exc)
"""


def test_a_driver_jvm_that_stops_answering_and_exits_late_is_one_clear_error():
    import subprocess

    result = subprocess.run([sys.executable, "-c", _SLOW_EXIT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (error,) = [line for line in result.stdout.splitlines() if line.startswith("ERROR ")]
    assert error == "ERROR Spark's driver JVM exited with code 0 during the job; Spark's log lines above say why"
    assert "Traceback" not in result.stderr  # no stop() of the JVM that no longer answers


def test_py4j_lost_connection_traceback_is_held_to_the_jobs_end_and_kept_while_the_driver_lives(spark, caplog):
    from py4j.protocol import Py4JNetworkError

    with spark_session(SparkConfig()):
        try:
            raise Py4JNetworkError("Error while sending or receiving")
        except Py4JNetworkError:
            logging.exception("Exception while sending command.")  # how py4j logs a broken connection
        logging.warning("another root record")
        assert caplog.messages == ["another root record"]
    assert caplog.messages == ["another root record", "Exception while sending command."]
    assert isinstance(caplog.records[-1].exc_info[1], Py4JNetworkError)
    assert logging.getLogger().filters == []


def test_only_an_error_from_a_dying_driver_jvm_waits_for_it_to_exit(spark):
    """A job that fails in a healthy JVM reports at once; a lost connection or an OutOfMemoryError waits."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import AnalysisException

    from sparkml_par.errors import SparkmlParError
    from sparkml_par.spark_runtime.session import _driver_may_be_exiting

    with pytest.raises(Py4JJavaError) as raw:  # a Java exception pyspark has no Python class for
        spark._jvm.java.util.ArrayList().get(5)
    with pytest.raises(AnalysisException) as converted:  # one pyspark has a Python class for
        spark.sql("SELECT * FROM no_such_table").collect()
    assert not _driver_may_be_exiting(raw.value)
    assert not _driver_may_be_exiting(converted.value)
    assert not _driver_may_be_exiting(SparkmlParError("the project's own error"))

    lost = RuntimeError("An error occurred while calling o42.collectToPython")
    lost.__context__ = ConnectionRefusedError(111, "Connection refused")  # raised while handling it
    assert _driver_may_be_exiting(lost)
    assert _driver_may_be_exiting(RuntimeError("Job aborted: java.lang.OutOfMemoryError: Java heap space"))
    assert _driver_may_be_exiting(RuntimeError("SparkException: Job 0 cancelled because SparkContext was shut down"))


def test_the_out_of_heap_error_says_the_driver_runs_the_tasks_only_on_local_n():
    from sparkml_par.spark_runtime.session import _driver_exit_message

    in_process = _driver_exit_message(SparkConfig(master="local[2]"), 52)
    assert "(on a local master it also runs every task)" in in_process
    for master in ("local-cluster[2,1,1024]", "spark://10.0.0.1:7077"):
        assert "runs every task" not in _driver_exit_message(SparkConfig(master=master), 52)


def _two_sleeping_tasks(sc) -> BackgroundJob:
    """A background job whose two tasks sleep for two minutes, returned once both run."""
    job = BackgroundJob(sc, lambda: sc.parallelize(range(2), 2).foreach(lambda _: time.sleep(120)), "sleeping tasks")
    deadline = time.monotonic() + 60
    while running_tasks(sc) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running_tasks(sc) == 2
    return job


def test_a_failed_jobs_session_stops_only_after_its_cancelled_tasks_end(spark):
    # A cancelled job fails at once while its tasks are still being killed; stopping Spark then made their
    # late ends log an ERROR with a Java stack trace above the job's own error.
    sc = spark.sparkContext
    job = _two_sleeping_tasks(sc)
    _cancel_and_await_tasks(sc, 60)
    assert running_tasks(sc) == 0
    assert job.wait(10)
    with pytest.raises(Exception, match="cancelled"):
        job.result()


def test_a_cancelled_job_has_ended_once_spark_reported_each_of_its_tasks_ended(spark):
    # Spark logs a killed task's report ("Lost task ... TaskKilled") after the job has failed; a session
    # stopped before it lost that report from the run's log.
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    job = _two_sleeping_tasks(sc)
    stage_ids = tracker.getActiveStageIds()
    assert len(stage_ids) == 1 and tracker.getStageInfo(stage_ids[0]).numActiveTasks == 2
    job.cancel()
    assert job.wait(60)
    assert tracker.getStageInfo(stage_ids[0]).numActiveTasks == 0
    with pytest.raises(Exception, match="cancelled"):
        job.result()
