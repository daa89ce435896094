"""Writing one split as a petastorm dataset: the only module that imports petastorm.

Spark writes its own columns (scalars, float arrays) straight from the DataFrame; petastorm only adds
its Unischema and row-group metadata. Going through petastorm codecs and `rdd.map(dict_to_spark_row)`
was measured at about a tenth of a plain Parquet write, so no column goes through a codec.

Row-group layout: petastorm hands row group i (in file-path order) to shard i % shard_count. So each
split gets a row-group count that is a multiple of data.max_shards, with near-equal rows per group:
a round-robin repartition gives every write task the same row count (within the number of input
partitions), maxRecordsPerFile cuts each task's rows into the same number of files, and each file is
one row group. Parquet 1.15 (Spark 4.0) has no row-count limit for row groups and its size-based cut
is approximate, so one group per file is the exact layout Spark's own writer can produce.
"""

from __future__ import annotations

import contextlib
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from sparkml_par.errors import SparkmlParError

log = logging.getLogger(__name__)

MIB = 1024 * 1024
# Spark writes a split in one task when it is this small: exact balance costs nothing here.
_SMALL_SPLIT_ROWS = 100_000


@dataclass(frozen=True)
class Layout:
    """How one split is cut: `tasks` write tasks, each writing row_groups / tasks files of one row group.

    row_limit is at most this many rows per file; when a task writes several files, Spark's
    maxRecordsPerFile cuts them at row_limit, and the task's last file takes the rest.
    """

    row_groups: int
    tasks: int
    row_limit: int
    single_input: bool


def plan_layout(rows: int, row_bytes: int, row_group_mb: float, max_shards: int, input_partitions: int,
                parallelism: int = 1, split: str = "split") -> Layout:
    """A row-group count that is a multiple of max_shards, as close to the size target as allowed."""
    if rows < max_shards:
        raise SparkmlParError(
            f"the {split} split has {rows} rows, fewer than data.max_shards={max_shards} (every shard needs at "
            f"least one row group of one row); lower data.max_shards or give the {split} split more rows")
    target_rows = max(1, int(row_group_mb * MIB // max(row_bytes, 1)))
    per_shard = max(1, math.ceil(rows / (target_rows * max_shards)))
    row_groups = max_shards * min(per_shard, rows // max_shards)
    # Each input partition deals its rows to the tasks in turn, so tasks differ by at most one row per
    # input partition; small splits are first gathered into one partition, which makes them differ by one.
    single_input = rows <= _SMALL_SPLIT_ROWS or input_partitions <= 1 or rows // row_groups <= 2 * input_partitions
    spread = 1 if single_input else input_partitions
    if not single_input:
        # Fewer write tasks than files: every task costs scheduling and a shuffle read, so keep about
        # two per core, each cutting its rows into equal files.
        for tasks in range(min(row_groups, 2 * max(parallelism, 1)), 0, -1):
            per_task = row_groups // tasks
            if row_groups % tasks or per_task == 1:
                continue
            low, high = math.ceil(rows / tasks - spread), math.floor(rows / tasks + spread)
            limit = math.ceil(high / per_task)
            if low > (per_task - 1) * limit:  # every task fills exactly per_task files
                return Layout(row_groups=row_groups, tasks=tasks, row_limit=limit, single_input=False)
    return Layout(row_groups=row_groups, tasks=row_groups, row_limit=-(-rows // row_groups) + spread - 1,
                  single_input=single_input)


def estimate_row_bytes(schema, shapes: dict[str, tuple[int, ...]]) -> int:
    """Uncompressed bytes of a row, from the Spark schema and the known array sizes."""
    from pyspark.sql.types import ArrayType

    total = 0
    for f in schema.fields:
        if isinstance(f.dataType, ArrayType):
            total += _type_bytes(f.dataType.elementType) * int(np.prod(shapes.get(f.name, (16,))))
        else:
            total += _type_bytes(f.dataType)
    return total


def _type_bytes(dtype) -> int:
    from pyspark.sql.types import BinaryType, StringType

    if isinstance(dtype, StringType):
        return 32
    if isinstance(dtype, BinaryType):
        return 4096
    return np.dtype(_numpy_type("", dtype)).itemsize


def unischema_from_spark(name: str, schema, shapes: dict[str, tuple[int, ...]]):
    """A petastorm Unischema for a Spark schema: scalars (binary included) and fixed-size numeric arrays.

    Images are stored decoded, as float arrays: petastorm's image codec needs OpenCV, and its
    restricted unpickler refuses any codec class outside petastorm.

    Columns whose names start with "_" are left out (see below).
    """
    from petastorm.codecs import ScalarCodec
    from petastorm.unischema import Unischema, UnischemaField
    from pyspark.sql.types import ArrayType

    fields = []
    for f in schema.fields:
        if f.name.startswith("_"):
            # petastorm readers return namedtuples, whose field names cannot start with "_": columns such
            # as _row_id stay in the Parquet files (Spark and pyarrow read them) but out of the Unischema.
            continue
        if isinstance(f.dataType, ArrayType):
            dtype = _numpy_type(f.name, f.dataType.elementType)
            # Arrays are stored as Parquet lists without a codec; readers return them as numpy arrays.
            fields.append(UnischemaField(f.name, dtype, tuple(shapes.get(f.name, (None,))), None, f.nullable))
        else:
            fields.append(UnischemaField(f.name, _numpy_type(f.name, f.dataType), (), ScalarCodec(f.dataType),
                                         f.nullable))
    return Unischema(name, fields)


def _numpy_type(column: str, dtype):
    from pyspark.sql import types as T

    numpy_types = {T.LongType: np.int64, T.IntegerType: np.int32, T.ShortType: np.int16, T.ByteType: np.int8,
                   T.FloatType: np.float32, T.DoubleType: np.float64, T.BooleanType: np.bool_,
                   T.StringType: np.str_, T.BinaryType: np.bytes_}
    if type(dtype) not in numpy_types:
        raise SparkmlParError(f"column {column!r} has type {dtype.simpleString()}, which a petastorm dataset "
                              f"cannot hold; convert it to a number, string, binary or array of numbers")
    return numpy_types[type(dtype)]


@contextlib.contextmanager
def _round_robin_without_sort(spark):
    """Round-robin repartition without Spark's local sort, which would double the write time.

    Without the sort the shuffle is marked indeterminate: if a map task is lost after some files were
    committed, Spark fails the write job instead of writing rows twice, and the staging directory
    is never published. Safety is kept; only the retry becomes a re-run.
    """
    key = "spark.sql.execution.sortBeforeRepartition"
    previous = spark.conf.get(key, None)
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


def write_split(spark, df, url: str, rows: int, *, shapes: dict[str, tuple[int, ...]], row_group_mb: float,
                max_shards: int, split: str = "split") -> dict[str, Any]:
    """Writes df (rows known) as a petastorm dataset at url; returns rows, row groups and rows per file."""
    from petastorm.etl.dataset_metadata import materialize_dataset

    partitions = df.rdd.getNumPartitions()
    row_bytes = estimate_row_bytes(df.schema, shapes)
    layout = plan_layout(rows, row_bytes, row_group_mb, max_shards, partitions,
                         spark.sparkContext.defaultParallelism, split)
    schema = unischema_from_spark(f"sparkml_par_{split}", df.schema, shapes)
    log.info("%s: %d rows -> %d files of one row group (<= %d rows each) from %d tasks", split, rows,
             layout.row_groups, layout.row_limit, layout.tasks)
    # The checkpoint keeps the one partition: the optimizer would fold coalesce(1) into the repartition.
    source = df.coalesce(1).localCheckpoint(eager=True) if layout.single_input else df
    # Far above one file's size, so that Parquet never cuts a second row group into a file.
    block_bytes = max(256 * MIB, 8 * layout.row_limit * row_bytes)
    writer = source.repartition(layout.tasks).write.option("parquet.block.size", str(block_bytes))
    if layout.tasks < layout.row_groups:
        writer = writer.option("maxRecordsPerFile", str(layout.row_limit))
    with materialize_dataset(spark, url, schema), _round_robin_without_sort(spark):
        writer.parquet(url)
    files = read_file_counts(spark, url)
    written = sum(groups for _, groups in files.values())
    if written != layout.row_groups or sum(n for n, _ in files.values()) != rows:
        raise SparkmlParError(
            f"the {split} split was written as {written} row groups / {sum(n for n, _ in files.values())} rows "
            f"instead of {layout.row_groups} / {rows}; Parquet cut row groups by size: lower "
            f"data.row_group_size_mb or give the driver and executors more memory")
    return {"rows": rows, "row_groups": written, "files": {path: n for path, (n, _) in files.items()}}


def read_file_counts(spark, url: str) -> dict[str, tuple[int, int]]:
    """(rows, row groups) of each Parquet file of a dataset, from the footers only."""
    import pyarrow.parquet as pq
    from petastorm.fs_utils import FilesystemResolver

    resolver = FilesystemResolver(url, spark.sparkContext._jsc.hadoopConfiguration(),
                                  user=spark.sparkContext.sparkUser())
    fs, root = resolver.filesystem(), resolver.get_dataset_path()
    paths = sorted(p for p in fs.ls(root) if p.rsplit("/", 1)[-1].endswith(".parquet")
                   and not p.rsplit("/", 1)[-1].startswith(("_", ".")))

    def footer(path: str) -> tuple[str, tuple[int, int]]:
        with fs.open(path) as handle:
            meta = pq.read_metadata(handle)
        return path.rsplit("/", 1)[-1], (meta.num_rows, meta.num_row_groups)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(pool.map(footer, paths))
