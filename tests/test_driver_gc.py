"""The garbage collector of a local[N] driver JVM: the parallel one, unless one is chosen anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sparkml_par.spark_runtime.session import THROUGHPUT_GC, driver_submit_opts
from sparkml_par.submit import submit_environment


def _collectors(spark) -> list[str]:
    """The names of the running driver JVM's garbage collectors (`PS Scavenge` is the parallel one's)."""
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    return sorted(bean.getName() for bean in beans)


def test_a_local_driver_gets_the_parallel_collector_after_the_options_it_has():
    assert driver_submit_opts("local[2]", [], {"SPARK_SUBMIT_OPTS": "-Xss4m"}) == f"-Xss4m {THROUGHPUT_GC}"
    assert driver_submit_opts("local", [], {}) == THROUGHPUT_GC
    for master in ("local-cluster[2,1,1024]", "spark://10.0.0.1:7077", "yarn", "k8s://https://10.0.0.1:6443"):
        assert driver_submit_opts(master, [], {}) is None  # their drivers run no tasks


@pytest.mark.parametrize(
    "env, settings",
    [
        ({"SPARK_SUBMIT_OPTS": "-Xss4m -XX:+UseG1GC"}, []),
        ({"JAVA_TOOL_OPTIONS": "-XX:+UseSerialGC"}, []),
        ({"JDK_JAVA_OPTIONS": "-XX:+UseZGC"}, []),
        ({"PYSPARK_SUBMIT_ARGS": "--driver-java-options -XX:+UseShenandoahGC pyspark-shell"}, []),
        ({}, ["-Dfoo=1 -XX:+UseG1GC"]),  # a session's spark.driver.extraJavaOptions, or a spark-submit argument
    ],
)
def test_a_collector_chosen_anywhere_wins(env, settings):
    assert driver_submit_opts("local[2]", settings, env) is None


def test_a_collector_in_spark_defaults_wins(tmp_path):
    (tmp_path / "spark-defaults.conf").write_text(
        "# cluster defaults\nspark.executor.memory 2g\nspark.driver.extraJavaOptions  -XX:+UseG1GC -Dx=1\n"
    )
    assert driver_submit_opts("local[2]", [], {"SPARK_CONF_DIR": str(tmp_path)}) is None
    (tmp_path / "spark-defaults.conf").write_text("spark.executor.extraJavaOptions -XX:+UseG1GC\n")
    assert driver_submit_opts("local[2]", [], {"SPARK_CONF_DIR": str(tmp_path)}) == THROUGHPUT_GC


def test_the_sessions_driver_jvm_runs_the_parallel_collector(spark):
    assert _collectors(spark) == ["PS MarkSweep", "PS Scavenge"]
    assert THROUGHPUT_GC not in os.environ.get("SPARK_SUBMIT_OPTS", "")  # set for that JVM's start only


# A session whose own settings choose the serial collector: the JVM must start with that one alone.
_USERS_COLLECTOR = """
import json
from sparkml_par.config import SparkConfig
from sparkml_par.spark_runtime.session import get_or_create_session

spark, _ = get_or_create_session(
    SparkConfig(master="local[1]", conf={"spark.driver.extraJavaOptions": "-XX:+UseSerialGC"})
)
beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
print(json.dumps(sorted(bean.getName() for bean in beans)))
spark.stop()
"""


def test_a_sessions_own_collector_starts_alone():
    env = {key: value for key, value in os.environ.items() if key != "SPARK_CONF_DIR"}
    command = [sys.executable, "-c", _USERS_COLLECTOR]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == ["Copy", "MarkSweepCompact"]


def test_spark_submit_on_a_local_master_gets_the_parallel_collector_unless_the_job_chose(tmp_path):
    env = {"PATH": os.environ["PATH"]}
    assert THROUGHPUT_GC in submit_environment(env, ["--master", "local[2]", "job.py"])["SPARK_SUBMIT_OPTS"]
    assert THROUGHPUT_GC in submit_environment(env, ["job.py"])["SPARK_SUBMIT_OPTS"]  # spark-submit's local[*]
    chosen = ["--master", "local[2]", "--driver-java-options", "-XX:+UseG1GC", "job.py"]
    assert THROUGHPUT_GC not in submit_environment(env, chosen)["SPARK_SUBMIT_OPTS"]
    properties = tmp_path / "job.properties"
    properties.write_text("spark.driver.extraJavaOptions=-XX:+UseSerialGC\n")
    from_file = ["--master=local[2]", "--properties-file", str(properties), "job.py"]
    assert THROUGHPUT_GC not in submit_environment(env, from_file)["SPARK_SUBMIT_OPTS"]
    on_cluster = ["--master", "spark://10.0.0.1:7077", "job.py"]
    assert THROUGHPUT_GC not in submit_environment(env, on_cluster)["SPARK_SUBMIT_OPTS"]
