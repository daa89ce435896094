"""The garbage collector of a `local[N]` driver JVM the project starts: Java's throughput collector.

On `local` and `local[N]` the driver JVM is also the executor: it runs every task of a batch job, where
pause times matter less than the work done. Java picks G1 on any machine of two cores or more; its write
barriers, remembered sets and concurrent marking cost a batch job time and memory. `sparkml-par prepare`
of the same Parquet input in fresh processes, G1 against the parallel collector (`-XX:+UseParallelGC`),
alternating, on two cores: 1,000,000 x 32 floats with a 6g heap 40.3 / 54.3 / 35.7 s against 34.5 / 40.1 /
37.1 s; 200,000 x 32 15.4 / 15.6 against 14.5 / 15.2 s; digits (1,797 rows) 9.2 / 9.4 against 8.7 / 9.0 s;
the driver JVM's peak memory in the 200,000-row prepare 1,212-1,240 against 1,041 MB. Inside `sparkml-par
run` end to end on 200,000 x 32 the prepare stage measured 15.9 against 15.5 / 15.5 s. The serial collector
measured alike on two cores, but collects with one thread on a machine of many.

A JVM given two collectors does not start, so a collector chosen anywhere the driver's Java options come from
wins, and none is added: SPARK_SUBMIT_OPTS, the JVM's own option variables, the session's Spark settings or
spark-submit's arguments, and the driver options of spark-defaults.conf. Other masters' drivers run no tasks
and keep Java's choice; their executors' collectors are the cluster's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Mapping, Optional

THROUGHPUT_GC = "-XX:+UseParallelGC"
_CHOOSES_A_COLLECTOR = re.compile(r"-XX:\+Use\w*GC\b")
# Where else a driver JVM's options come from: the JVM's own variables, and pyspark's spark-submit arguments.
_OPTION_VARIABLES = (
    "SPARK_SUBMIT_OPTS",
    "JAVA_TOOL_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "_JAVA_OPTIONS",
    "PYSPARK_SUBMIT_ARGS",
)
_DRIVER_OPTION_SETTINGS = ("spark.driver.extraJavaOptions", "spark.driver.defaultJavaOptions")


def driver_submit_opts(master: str, settings: Iterable[str], env: Mapping[str, str]) -> Optional[str]:
    """SPARK_SUBMIT_OPTS for a driver JVM of master started with env: THROUGHPUT_GC added on `local` and
    `local[N]` unless a collector is chosen already; None when nothing is added. settings: the other texts
    the driver's options may come from (the session's Spark settings, spark-submit's arguments)."""
    if not (master == "local" or master.startswith("local[")):
        return None
    sources = [env.get(name, "") for name in _OPTION_VARIABLES] + list(settings) + _spark_defaults_options(env)
    if any(_CHOOSES_A_COLLECTOR.search(text) for text in sources):
        return None
    return f"{env.get('SPARK_SUBMIT_OPTS', '')} {THROUGHPUT_GC}".strip()


def _spark_defaults_options(env: Mapping[str, str]) -> list[str]:
    """The driver Java option lines of spark-defaults.conf in Spark's conf directory (SPARK_CONF_DIR, else
    SPARK_HOME/conf), which spark-submit reads."""
    conf_dir = env.get("SPARK_CONF_DIR") or (env.get("SPARK_HOME") and str(Path(env["SPARK_HOME"], "conf")))
    if not conf_dir:
        return []
    try:
        lines = Path(conf_dir, "spark-defaults.conf").read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if line.strip().startswith(_DRIVER_OPTION_SETTINGS)]
