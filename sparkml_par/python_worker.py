"""What the project's functions do first in a Spark Python worker (scoring, the dataset writer, the image
decoder, the synthetic source).

pyspark before 4.2 calls `importlib.invalidate_caches()` at the start of every Python task (SPARK-54744
made it conditional). Since Python 3.10 that makes every zip importer re-read its archive's whole
directory, and a worker holds one importer per package it imported from Spark's own archives (pyspark.zip
and its subpackages, py4j's zip, the spark-core jar Spark puts on the path): 0.14-0.15 s of each task
here (a local[2] worker, mean of 10 calls), 0.00002 s once the importers keep their directories. Those
archives are Spark's installation: they do not change under a running worker. Scoring 200,000 rows in
Spark: 133,468 -> 175,092 rows/s (`python -m benchmarks.score --rows 200000 --repeats 3`, a run before and
one after). pyspark >= 4.2 invalidates only when a task changed the path; there the call spares little.
"""

from __future__ import annotations

import os
import re
import sys
import zipimport

# The archives Spark puts on its workers' path (PythonUtils.sparkPythonPath): pyspark, py4j, spark-core.
SPARK_ARCHIVES = re.compile(r"pyspark\.zip|py4j-[^/]*-src\.zip|spark-core_[^/]*\.jar")


def keep_spark_archive_caches() -> None:
    """Makes this worker's importers of Spark's own archives keep their directory on cache invalidation.
    Idempotent and cheap (a scan of a few dozen importers); imports from the archives work as before."""
    for importer in list(sys.path_importer_cache.values()):
        if isinstance(importer, zipimport.zipimporter) and SPARK_ARCHIVES.fullmatch(os.path.basename(importer.archive)):
            importer.invalidate_caches = _keep


def _keep() -> None:
    """An archive importer's invalidate_caches that keeps what it read."""
