"""The options of a local[N] driver JVM: the parallel garbage collector, unless one is chosen anywhere; a metaspace
threshold above Spark's classes, unless one is set; and for a small input the C1 compiler alone, for any other C2's
thresholds raised, unless the compilers are chosen or tuned anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from data_prep.ingest import input_bytes
from sparkml_par.config import DataConfig, SyntheticConfig
from sparkml_par.spark_runtime.session import (
    COMPILER_DIRECTIVES,
    LATE_C2,
    METASPACE_THRESHOLD,
    QUICK_JIT,
    SHORT_RUN_INPUT_BYTES,
    THROUGHPUT_GC,
    diagnostic_command,
    driver_submit_opts,
)
from sparkml_par.submit import submit_environment


def _collectors(spark) -> list[str]:
    """The names of the running driver JVM's garbage collectors (`PS Scavenge` is the parallel one's)."""
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    return sorted(bean.getName() for bean in beans)


def test_a_local_driver_gets_the_parallel_collector_after_the_options_it_has():
    assert driver_submit_opts("local[2]", [], {"SPARK_SUBMIT_OPTS": "-Xss4m"}) == (
        f"-Xss4m {THROUGHPUT_GC} {METASPACE_THRESHOLD} {LATE_C2}"
    )
    assert driver_submit_opts("local", [], {}) == f"{THROUGHPUT_GC} {METASPACE_THRESHOLD} {LATE_C2}"
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
    assert (
        driver_submit_opts("local[2]", settings, env)
        == " ".join([env.get("SPARK_SUBMIT_OPTS", ""), METASPACE_THRESHOLD, LATE_C2]).strip()
    )
    tuned = f"{env.get('JAVA_TOOL_OPTIONS', '')} -XX:MetaspaceSize=64m -XX:CompileThresholdScaling=2"
    chosen = {**env, "JAVA_TOOL_OPTIONS": tuned}
    assert driver_submit_opts("local[2]", settings, chosen) is None  # nothing left to add


def test_a_collector_in_spark_defaults_wins(tmp_path):
    (tmp_path / "spark-defaults.conf").write_text(
        "# cluster defaults\nspark.executor.memory 2g\nspark.driver.extraJavaOptions  -XX:+UseG1GC -Dx=1\n"
    )
    assert driver_submit_opts("local[2]", [], {"SPARK_CONF_DIR": str(tmp_path)}) == f"{METASPACE_THRESHOLD} {LATE_C2}"
    (tmp_path / "spark-defaults.conf").write_text("spark.executor.extraJavaOptions -XX:+UseG1GC\n")
    assert driver_submit_opts("local[2]", [], {"SPARK_CONF_DIR": str(tmp_path)}) == (
        f"{THROUGHPUT_GC} {METASPACE_THRESHOLD} {LATE_C2}"
    )


def test_the_sessions_driver_jvm_runs_the_parallel_collector(spark):
    assert _collectors(spark) == ["PS MarkSweep", "PS Scavenge"]
    assert METASPACE_THRESHOLD in _jvm_arguments(spark)
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


def _jvm_arguments(spark) -> list[str]:
    return list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())


def test_a_local_driver_for_a_small_input_compiles_with_c1_alone():
    assert (
        driver_submit_opts("local[2]", [], {}, short_run=True) == f"{THROUGHPUT_GC} {METASPACE_THRESHOLD} {QUICK_JIT}"
    )
    assert driver_submit_opts("local[2]", [], {"SPARK_SUBMIT_OPTS": "-XX:+UseG1GC"}, short_run=True) == (
        f"-XX:+UseG1GC {METASPACE_THRESHOLD} {QUICK_JIT}"
    )
    assert driver_submit_opts("spark://10.0.0.1:7077", [], {}, short_run=True) is None  # its driver runs no tasks


@pytest.mark.parametrize("short_run", [True, False])
@pytest.mark.parametrize(
    "env, settings",
    [
        ({"SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=4"}, []),
        ({"JAVA_TOOL_OPTIONS": "-XX:-TieredCompilation"}, []),
        ({}, ["-Dfoo=1 -XX:CompilationMode=high-only"]),
        ({"SPARK_SUBMIT_OPTS": "-XX:Tier4BackEdgeThreshold=80000"}, []),
        ({}, ["-XX:CompileThresholdScaling=0.5"]),
    ],
)
def test_compilers_chosen_or_tuned_anywhere_win(env, settings, short_run):
    assert (
        driver_submit_opts("local[2]", settings, env, short_run=short_run)
        == " ".join([env.get("SPARK_SUBMIT_OPTS", ""), THROUGHPUT_GC, METASPACE_THRESHOLD]).strip()
    )


def test_the_tests_session_started_without_an_input_size_compiles_tiered_with_c2s_thresholds_raised(spark):
    arguments = _jvm_arguments(spark)
    assert QUICK_JIT not in arguments
    assert set(LATE_C2.split()) <= set(arguments)


def test_a_driver_with_c2s_thresholds_raised_keeps_sparks_per_query_code_from_c2(spark):
    """The directives are in the JVM's stack: their classes, in the JVM's notation, with C2 excluded."""
    (directives,) = json.loads(COMPILER_DIRECTIVES.read_text())
    assert directives["c2"] == {"Exclude": True} and "org.antlr.*::*" in directives["match"]
    printed = diagnostic_command(spark.sparkContext, "compilerDirectivesPrint")
    ours = next(block for block in printed.split("Directive:") if "org/antlr/*.*" in block)
    matching = ours.split("matching:")[1].splitlines()[0]
    assert sorted(p.strip() for p in matching.split(",")) == sorted(
        p.replace(".", "/").replace("::", ".") for p in directives["match"]
    )
    c1, c2 = ours.split("c1 directives:")[1].split("c2 directives:")
    assert "Exclude:true" in c2 and "Exclude:false" in c1


# Three sessions, one after another, in one driver JVM: how many times its directive stack then holds ours.
_SESSIONS_IN_ONE_JVM = """
from sparkml_par.config import SparkConfig
from sparkml_par.spark_runtime.session import diagnostic_command, get_or_create_session

for _ in range(3):
    spark, _ = get_or_create_session(SparkConfig(master="local[1]"))
    printed = diagnostic_command(spark.sparkContext, "compilerDirectivesPrint")
    spark.stop()
print(printed.count("org/antlr/*.*"))
"""


def test_later_sessions_in_the_same_driver_jvm_add_the_directives_once():
    env = {key: value for key, value in os.environ.items() if key not in ("SPARK_CONF_DIR", "SPARK_SUBMIT_OPTS")}
    done = subprocess.run(
        [sys.executable, "-c", _SESSIONS_IN_ONE_JVM], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "1"


# A session for an input of 1 kB, then the JVM's arguments.
_SMALL_INPUT_SESSION = """
import json
from sparkml_par.config import SparkConfig
from sparkml_par.spark_runtime.session import get_or_create_session

spark, _ = get_or_create_session(SparkConfig(master="local[1]"), input_bytes=1000)
print(json.dumps(list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())))
spark.stop()
"""


def test_a_session_for_a_small_input_starts_its_driver_with_c1_alone():
    env = {key: value for key, value in os.environ.items() if key not in ("SPARK_CONF_DIR", "SPARK_SUBMIT_OPTS")}
    done = subprocess.run(
        [sys.executable, "-c", _SMALL_INPUT_SESSION], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    arguments = json.loads(done.stdout.splitlines()[-1])
    assert QUICK_JIT in arguments and THROUGHPUT_GC in arguments and METASPACE_THRESHOLD in arguments


def test_input_bytes_counts_local_files_before_a_session_starts(tmp_path):
    data = tmp_path / "data"
    (data / "part=1").mkdir(parents=True)
    (data / "a.csv").write_bytes(b"x" * 100)
    (data / "part=1" / "b.csv").write_bytes(b"x" * 50)
    (data / "_SUCCESS").write_bytes(b"x" * 7)  # what Spark's readers skip, as hidden files
    (data / ".a.csv.crc").write_bytes(b"x" * 9)

    def size(path: str, limit: int = SHORT_RUN_INPUT_BYTES):
        return input_bytes(DataConfig(source="csv", path=path), limit)

    assert size(str(data)) == 150
    assert size(f"file://{data}") == 150
    assert size(str(data / "*.csv")) == 100
    assert size(str(data / "_SUCCESS")) == 7  # named by the path itself: counted as the reader reads it
    assert size(str(data), limit=99) == 100  # counted until it passes the limit
    assert size(str(tmp_path / "missing.csv")) is None
    assert size(str(data / "{a,b}.csv")) is None  # Hadoop's alternatives: left to Spark
    assert size("s3a://bucket/data.csv") is None
    assert input_bytes(DataConfig(source="synthetic", synthetic=SyntheticConfig(rows=1000, features=3)), 10) == 32_000
    assert input_bytes(DataConfig(source="digits"), SHORT_RUN_INPUT_BYTES) <= SHORT_RUN_INPUT_BYTES
