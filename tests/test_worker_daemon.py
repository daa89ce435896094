"""A local session that trains or scores forks its Python workers from a daemon that imported torch first."""

import json
import os
import subprocess
import sys

from sparkml_par.config import SparkConfig
from sparkml_par.spark_runtime import worker_daemon
from sparkml_par.spark_runtime.session import TORCH_WORKERS, session_settings

# A fresh process: a session without worker imports, then one with torch; what a task of each found.
_WORKERS_REPORT = """
import json, sys
from sparkml_par.config import SparkConfig
from sparkml_par.spark_runtime.session import get_or_create_session

def found(_):
    import os
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as parent:
        daemon = parent.read().split(b"\\0")[2].decode()
    yield {"torch": "torch" in sys.modules, "daemon": daemon}

report = {}
for name, imports in (("plain", ()), ("torch", ("torch",))):
    spark, _ = get_or_create_session(SparkConfig(master="local[2]"), worker_imports=imports)
    report[name] = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(found).collect()
    spark.stop()
print(json.dumps(report))
"""


def test_a_session_that_trains_forks_workers_with_torch_imported():
    env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
    run = subprocess.run([sys.executable, "-c", _WORKERS_REPORT], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["plain"] == [{"torch": False, "daemon": "pyspark.daemon"}] * 2
    assert report["torch"] == [{"torch": True, "daemon": worker_daemon.__name__}] * 2


def test_only_local_sessions_that_import_something_get_the_daemon():
    daemon_module, imports = "spark.python.daemon.module", f"spark.executorEnv.{worker_daemon.WORKER_IMPORTS}"
    local = session_settings(SparkConfig(master="local[2]"), TORCH_WORKERS)
    assert local[daemon_module] == worker_daemon.__name__ and local[imports] == "torch"
    assert daemon_module not in session_settings(SparkConfig(master="local[2]"))
    assert daemon_module not in session_settings(SparkConfig(master="spark://10.0.0.1:7077"), TORCH_WORKERS)
    users = session_settings(SparkConfig(master="local[2]", conf={daemon_module: "their.daemon"}), TORCH_WORKERS)
    assert users[daemon_module] == "their.daemon"


def test_a_module_that_fails_to_import_is_left_to_the_worker(monkeypatch):
    monkeypatch.setenv(worker_daemon.WORKER_IMPORTS, "no_such_module_here,colorsys")
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    worker_daemon.import_worker_modules()
    assert "colorsys" in sys.modules and "no_such_module_here" not in sys.modules
