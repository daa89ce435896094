"""What the project's functions do in a Spark Python worker once their imports are done (scoring, the
dataset writer, the image decoder, the synthetic source): `prepare_worker`, two fixes of what a reused
worker pays at every task.

Spark's archives. pyspark before 4.2 calls `importlib.invalidate_caches()` at the start of every Python
task (SPARK-54744 made it conditional). Since Python 3.10 that makes every zip importer re-read its
archive's whole directory, and a worker holds one importer per package it imported from Spark's own
archives (pyspark.zip and its subpackages, py4j's zip, the spark-core jar Spark puts on the path), so
every task re-reads them all. Those archives are Spark's installation: they do not change under a running
worker, so their importers keep their directories. pyspark >= 4.2 invalidates only when a task changed the
path.

The garbage collector. pyspark's daemon runs `gc.collect()` after every task of a reused worker (4.0 and
4.3 alike), a full pass over every object the worker holds, with torch imported every object of every
module torch loaded. Frozen objects (`gc.freeze`, moved to the collector's permanent generation) are
left out of that pass, so the worker freezes what its imports created. Freezing is for objects that live as
long as the process; a frozen object that later becomes cyclic garbage is never reclaimed, so the worker
freezes only when it imported modules since it last froze.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import zipimport

# The archives Spark puts on its workers' path (PythonUtils.sparkPythonPath): pyspark, py4j, spark-core.
SPARK_ARCHIVES = re.compile(r"pyspark\.zip|py4j-[^/]*-src\.zip|spark-core_[^/]*\.jar")

_modules_when_frozen = 0


def prepare_worker() -> None:
    """Both fixes; call it after the worker function's imports, so that what they loaded is frozen."""
    keep_spark_archive_caches()
    freeze_imported_objects()


def keep_spark_archive_caches() -> None:
    """Makes this worker's importers of Spark's own archives keep their directory on cache invalidation.
    Idempotent and cheap (a scan of the worker's importers); imports from the archives still work."""
    for importer in list(sys.path_importer_cache.values()):
        if isinstance(importer, zipimport.zipimporter) and SPARK_ARCHIVES.fullmatch(os.path.basename(importer.archive)):
            importer.invalidate_caches = _keep


def freeze_imported_objects() -> None:
    """Moves every object the garbage collector tracks now out of its later passes, when modules were
    imported since the last time: a task that imports nothing new freezes nothing of its own."""
    global _modules_when_frozen
    if len(sys.modules) > _modules_when_frozen:
        gc.freeze()
        _modules_when_frozen = len(sys.modules)


def _keep() -> None:
    """An archive importer's invalidate_caches that keeps what it read."""
