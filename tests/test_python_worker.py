"""The project's functions keep Spark's Python workers from re-reading Spark's archives on every task."""


def _worker_import_state(_):
    """In a Spark Python worker, after the project's call and a cache invalidation (what pyspark < 4.2 does
    at every task): which of Spark's archives it imports from, which importers re-read their archive, and
    whether a pyspark module not imported before still imports."""
    import importlib
    import os
    import sys
    import zipimport

    from sparkml_par.python_worker import SPARK_ARCHIVES, keep_spark_archive_caches

    keep_spark_archive_caches()
    importers = [
        f
        for f in sys.path_importer_cache.values()
        if isinstance(f, zipimport.zipimporter) and SPARK_ARCHIVES.fullmatch(os.path.basename(f.archive))
    ]
    # CPython's zipimporter holds its archive's directory in _files and replaces it when it re-reads.
    directories = [f._files for f in importers]
    importlib.invalidate_caches()
    reread = [f.archive for f, d in zip(importers, directories) if f._files is not d]
    import pyspark.ml.stat  # noqa: F401  (a pyspark package no earlier task of this worker imported)
    from pyspark import TaskContext

    yield sorted({os.path.basename(f.archive) for f in importers}), reread, TaskContext.get().partitionId()


def test_workers_keep_spark_archive_directories(spark):
    results = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_worker_import_state).collect()

    assert sorted(r[2] for r in results) == [0, 1]
    for archives, reread, _ in results:
        assert "pyspark.zip" in archives and any(a.startswith("spark-core_") for a in archives)
        assert reread == []
