"""Spark's Python daemon with the modules its workers will need imported before it forks them.

Spark starts one daemon per Python environment and forks a worker from it for each concurrent task. A
worker that trains or scores imports torch, which takes seconds of a core, and every rank of a barrier
stage imports it at once. Run as `spark.python.daemon.module` (local masters, sessions that train or
score: `sparkml_par.spark_runtime.session`), this daemon imports the modules named in WORKER_IMPORTS
once, freezes what they created out of the garbage collector's passes (so the forked workers share those
pages instead of copying them), and then serves as pyspark's own daemon does.
"""

from __future__ import annotations

import gc
import importlib
import os

# Comma-separated module names, from the session's spark.executorEnv settings.
WORKER_IMPORTS = "SPARKML_PAR_WORKER_IMPORTS"


def import_worker_modules() -> None:
    """Imports each module WORKER_IMPORTS names; one that fails to import is left to the worker that needs it,
    where the error reaches the task with Spark's traceback instead of stopping the daemon."""
    for name in filter(None, os.environ.get(WORKER_IMPORTS, "").split(",")):
        try:
            importlib.import_module(name)
        except Exception:  # the worker's own import raises it, where Spark reports it
            continue


if __name__ == "__main__":
    import_worker_modules()
    gc.freeze()
    from pyspark import daemon

    daemon.manager()
