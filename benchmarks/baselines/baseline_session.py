"""The loopback local[N] session both baseline scripts build in their own virtual environment.

The baselines run without the project installed, so they cannot use sparkml_par.spark_runtime.session.
"""

import os
import sys

LOOPBACK = "127.0.0.1"


def build_session(num_slots: int, app_name: str):
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(f"local[{num_slots}]")
        .appName(app_name)
        .config("spark.driver.host", LOOPBACK)
        .config("spark.driver.bindAddress", LOOPBACK)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
