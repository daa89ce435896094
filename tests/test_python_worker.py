"""The project's functions keep Spark's Python workers from re-reading Spark's archives on every task."""


def _worker_import_state(_):
    """In a Spark Python worker, after the project's call and a cache invalidation (what pyspark < 4.2 does
    at every task): which of Spark's archives it imports from, which importers re-read their archive, and
    whether a pyspark module not imported before still imports."""
    import importlib
    import os
    import sys
    import zipimport

    from sparkml_par.spark_runtime.python_worker import SPARK_ARCHIVES, keep_spark_archive_caches

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


def _worker_collector_state(_):
    """In a Spark Python worker: the objects the collector tracks before and after the project's call with
    torch imported, and what a second call, with nothing newly imported, does with a garbage cycle."""
    import gc

    import torch  # noqa: F401  (what the scoring UDF imports: ~200,000 objects)

    from sparkml_par.spark_runtime.python_worker import prepare_worker

    tracked_before = len(gc.get_objects())
    prepare_worker()
    tracked_after, frozen = len(gc.get_objects()), gc.get_freeze_count()
    cycle = []
    cycle.append(cycle)
    del cycle
    prepare_worker()
    yield tracked_before, tracked_after, frozen, gc.get_freeze_count(), gc.collect()


def test_workers_freeze_what_their_imports_loaded(spark):
    """pyspark's daemon collects garbage after every task of a reused worker: with the imported modules'
    objects frozen, that pass no longer walks torch's objects, and later garbage is still collected."""
    results = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_worker_collector_state).collect()

    assert len(results) == 2
    for tracked_before, tracked_after, frozen, frozen_later, collected in results:
        assert tracked_before > 100_000
        assert tracked_after < tracked_before // 20
        assert frozen >= tracked_before - tracked_after
        assert frozen_later == frozen  # nothing imported since: the cycle was not frozen ...
        assert collected >= 1  # ... and the collector reclaimed it


def _worker_pid(_):
    import os

    yield os.getpid()


def _worker_pids_as_arrow(batches):
    import os

    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"pid": [os.getpid()]})


def test_scoring_runs_in_the_workers_the_training_barrier_stage_started(spark):
    """Spark keeps one pool of Python workers per environment: mapInArrow (scoring, dataset writes) and a
    barrier stage of RDD tasks (training) must share one, or scoring imports torch again in new workers."""
    trained_in = set(spark.sparkContext.parallelize(range(2), 2).barrier().mapPartitions(_worker_pid).collect())
    scored_in = {
        row.pid for row in spark.range(0, 2, 1, numPartitions=2).mapInArrow(_worker_pids_as_arrow, "pid long").collect()
    }

    assert len(trained_in) == 2
    assert scored_in <= trained_in
