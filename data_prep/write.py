"""Writing the splits as petastorm datasets: the only module that imports petastorm.

Spark hands each write task its partition as Arrow batches and the task writes them with pyarrow:
no column goes through a petastorm codec, which adds its own encoding to a plain Parquet write, and no
row crosses a shuffle: the row-group layout below balances the shards without a repartition; petastorm
only adds its Unischema and row-group metadata.

Row-group layout: petastorm hands row group i (in file-path order) to shard i % shard_count. Every
partition is cut into a multiple of data.max_shards files of one row group each, near-equal within
the partition and named so that a partition's files are consecutive: any shard count dividing
data.max_shards then gets an equal part (within a row per file) of every partition.
"""

from __future__ import annotations

import logging
import math
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from sparkml_par.contract import SPLIT
from sparkml_par.errors import SparkmlParError
from sparkml_par.io.store import Store

log = logging.getLogger(__name__)

# petastorm 0.12 reads through a legacy pyarrow ParquetDataset, whose attributes are deprecated since pyarrow 5:
# deprecation notices of petastorm's own calls on every supported stack, not the user's to act on.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"petastorm(\.|$)")

MIB = 1024 * 1024
# How a split's files are encoded: zstd, with no dictionaries. The features are one list column of every
# feature's values, too many distinct ones for a dictionary page (pyarrow's default builds one, then falls
# back to plain), so a dictionary costs write time and saves fewer bytes than zstd does, which reads back
# faster too (ARCHITECTURE.md, measured decisions). Spark and petastorm read zstd on every supported stack.
_PARQUET_OPTIONS = {"compression": "zstd", "use_dictionary": False}


def plan_row_groups(counts: dict[int, int], target_rows: int, max_shards: int) -> dict[int, int]:
    """Row groups per input partition: a multiple of max_shards each, of at most target_rows rows where possible.

    A partition's rows are cut into near-equal groups (sizes differ by at most one row), and its groups
    are consecutive in file-path order, so every shard gets an equal part of every partition.
    """
    plan = {}
    for partition, rows in counts.items():
        if rows:
            per_shard = max(1, min(math.ceil(rows / (target_rows * max_shards)), rows // max_shards))
            plan[partition] = max_shards * per_shard
    return plan


def group_sizes(rows: int, groups: int) -> list[int]:
    """rows cut into `groups` sizes that differ by at most one."""
    return [rows // groups + (1 if i < rows % groups else 0) for i in range(groups)]


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
            fields.append(
                UnischemaField(f.name, _numpy_type(f.name, f.dataType), (), ScalarCodec(f.dataType), f.nullable)
            )
    return Unischema(name, fields)


def _numpy_type(column: str, dtype):
    from pyspark.sql import types as T

    numpy_types = {
        T.LongType: np.int64,
        T.IntegerType: np.int32,
        T.ShortType: np.int16,
        T.ByteType: np.int8,
        T.FloatType: np.float32,
        T.DoubleType: np.float64,
        T.BooleanType: np.bool_,
        T.StringType: np.str_,
        T.BinaryType: np.bytes_,
    }
    if type(dtype) not in numpy_types:
        raise SparkmlParError(
            f"column {column!r} has type {dtype.simpleString()}, which a petastorm dataset "
            f"cannot hold; convert it to a number, string, binary or array of numbers"
        )
    return numpy_types[type(dtype)]


def write_split(
    spark,
    df,
    url: str,
    rows: int,
    *,
    shapes: dict[str, tuple[int, ...]],
    row_group_mb: float,
    max_shards: int,
    split: str = "split",
) -> dict[str, Any]:
    """Writes df (rows known) as one petastorm dataset at url; returns rows, row groups and rows per file."""
    from pyspark.sql import functions as F

    tagged = df.withColumn(SPLIT, F.lit(split))
    return write_splits(
        spark, tagged, {split: url}, {split: rows}, shapes=shapes, row_group_mb=row_group_mb, max_shards=max_shards
    )[split]


def write_splits(
    spark,
    df,
    urls: dict[str, str],
    rows: dict[str, int],
    *,
    shapes: dict[str, tuple[int, ...]],
    row_group_mb: float,
    max_shards: int,
    partition_rows: dict[str, dict[int, int]] | None = None,
    encode=None,
) -> dict[str, dict[str, Any]]:
    """Writes each split of df (named in its SPLIT column, its rows known) as a petastorm dataset at
    urls[split]; returns each one's rows, row groups and rows per file.

    The splits are written by one Spark job, each task writing its partition's rows of every split, so the
    rows are read once. A split with a partition too small for one row per shard is written on its own,
    from one task. partition_rows: each split's rows per Spark partition where the caller counted them
    (prepare counts them with its column statistics); otherwise they are counted here. encode: what each
    task makes of each Arrow table of df's rows before writing it, and `encode.schema` of df's schema the
    written one (prepare's featurize.BatchFeatures); None writes the rows as they are.
    """
    from pyspark.sql import functions as F

    for split, n in rows.items():
        if n < max_shards:
            raise SparkmlParError(
                f"the {split} split has {n} rows, fewer than data.max_shards={max_shards} (every shard needs at "
                f"least one row group of one row); lower data.max_shards or give the {split} split more rows"
            )
    roots = [(store.fs, store.root) for store in map(_dataset_store, urls.values())]
    written = df.drop(SPLIT).schema
    if encode is not None:
        written = encode.schema(written)
    target_rows = max(1, int(row_group_mb * MIB // max(estimate_row_bytes(written, shapes), 1)))
    source, counts = _partitions(spark, df, rows, target_rows, max_shards, partition_rows)
    alone = [split for split in rows if any(n < max_shards for n in counts[split].values())]
    together = {split: counts[split] for split in rows if split not in alone}
    jobs = [(source.where(~F.col(SPLIT).isin(alone)) if alone else source, together)] if together else []
    jobs += [(source.where(F.col(SPLIT) == split).coalesce(1), {split: {0: rows[split]}}) for split in alone]
    for fs, root in roots:
        fs.create_dir(root, recursive=True)
    planned: dict[str, int] = {}
    for part, part_counts in jobs:
        sizes = {}
        for split, per_partition in part_counts.items():
            plan = plan_row_groups(per_partition, target_rows, max_shards)
            sizes[split] = {partition: group_sizes(per_partition[partition], n) for partition, n in plan.items()}
            planned[split] = sum(plan.values())
            log.info(
                "%s: %d rows -> %d files of one row group from %d tasks", split, rows[split], planned[split], len(plan)
            )
        writer = _partition_writer({split: urls[split] for split in sizes}, sizes, encode)
        part.mapInArrow(writer, "file string").collect()
    return {
        split: _finish(
            url, rows[split], planned[split], unischema_from_spark(f"sparkml_par_{split}", written, shapes), split
        )
        for split, url in urls.items()
    }


def start_workers(spark) -> None:
    """Runs a task on every core but one that imports what the write tasks import, so that Spark starts its
    Python workers (and its JVM the Arrow path to them) beside the steps before the write instead of in the
    write's first tasks; Spark reuses the idle workers for the write and starts another where one more task
    needs it. The core left free runs validation's first task meanwhile, which would otherwise wait for the
    workers' start (the longer where their daemon imports torch for training first)."""
    cores = max(1, spark.sparkContext.defaultParallelism - 1)
    spark.range(0, cores, 1, cores).mapInArrow(_with_writer_imports, "id long").collect()


def _with_writer_imports(batches):
    """A task of start_workers: a worker that ran it holds the write tasks' imports (this module's among them)."""
    import pyarrow.compute  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    from sparkml_par.spark_runtime.python_worker import prepare_worker

    prepare_worker()
    yield from batches


def _finish(url: str, rows: int, planned: int, schema, split: str) -> dict[str, Any]:
    """Checks a written split against its plan and adds petastorm's metadata."""
    store = _dataset_store(url)
    fs, root = store.fs, store.root
    _remove_unfinished(fs, root)
    files = read_file_counts(url)
    groups = sum(n for _, n in files.values())
    if sum(n for n, _ in files.values()) != rows or groups != planned or groups != len(files):
        raise SparkmlParError(
            f"the {split} split was written as {groups} row groups / {sum(n for n, _ in files.values())} rows "
            f"instead of {planned} / {rows}; is something else writing to {url}?"
        )
    _add_petastorm_metadata(url, schema, {name: n for name, (_, n) in files.items()})
    return {"rows": rows, "row_groups": groups, "files": {path: n for path, (n, _) in files.items()}}


def _add_petastorm_metadata(url: str, schema, row_groups: dict[str, int]) -> None:
    """What petastorm's materialize_dataset adds after a write: the Unischema and row groups per file, as
    key-value metadata of `_common_metadata` (the Arrow schema of the files, as petastorm writes it).

    materialize_dataset counts the row groups again in a Spark job over every footer, a large part of a
    write; the footers were just read here, so their counts are written directly.
    Written with pyarrow.fs, not petastorm's helper: that one takes the legacy ParquetDataset, gone in
    pyarrow 15. petastorm then reads the dataset back (its schema and row groups), on every supported stack.
    """
    import json
    import pickle

    import pyarrow.parquet as pq
    from petastorm.etl.dataset_metadata import ROW_GROUPS_PER_FILE_KEY, UNISCHEMA_KEY, get_schema_from_dataset_url

    store = _dataset_store(url)
    fs, root = store.fs, store.root
    with fs.open_input_file(f"{root}/{min(row_groups)}") as first:
        arrow_schema = pq.read_schema(first)
    metadata = {
        **(arrow_schema.metadata or {}),
        UNISCHEMA_KEY: pickle.dumps(schema),
        ROW_GROUPS_PER_FILE_KEY: json.dumps(row_groups).encode(),
    }
    with fs.open_output_stream(f"{root}/_common_metadata") as out:
        pq.write_metadata(arrow_schema.with_metadata(metadata), out)
    get_schema_from_dataset_url(url)  # fails if petastorm cannot read what was written


def _dataset_store(url: str) -> Store:
    """A split's directory as the executors write it (sparkml_par.io.store), or an error naming the output."""
    try:
        return Store(url)
    except SparkmlParError as exc:
        raise SparkmlParError(
            f"cannot write a dataset to {url!r}: {exc}; datasets are written by pyarrow from the executors, "
            f"so data.output must be a local or mounted path (e.g. /dbfs/... on Databricks) or a URL it opens"
        ) from None


def _partitions(spark, df, rows: dict[str, int], target_rows: int, max_shards: int, counted):
    """df with no more partitions than its rows need, and each split's rows per partition.

    coalesce merges neighbouring partitions without a shuffle; the partitions of a coalesced df (or of
    one whose rows the caller did not count) are counted by one aggregate in the JVM. The data_prep job
    reads a persisted DataFrame, so no input is read twice.
    """
    from pyspark.sql import functions as F

    wanted = max(spark.sparkContext.defaultParallelism, sum(rows.values()) // (target_rows * max_shards), 1)
    if df.rdd.getNumPartitions() > wanted:
        df = df.coalesce(wanted)
        counted = None
    if counted is None:
        counted = {}
        for split, partition, n in df.groupBy(SPLIT, F.spark_partition_id()).count().collect():
            counted.setdefault(split, {})[partition] = n
    counts = {split: {p: n for p, n in counted.get(split, {}).items() if n} for split in rows}
    for split, n in rows.items():
        if sum(counts[split].values()) != n:
            raise SparkmlParError(
                f"the {split} split was counted as {n} rows but its partitions hold "
                f"{sum(counts[split].values())}; is the input changing while it is being prepared?"
            )
    return df, counts


def _partition_writer(urls: dict[str, str], sizes: dict[str, dict[int, list[int]]], encode):
    """The function each write task runs: its partition's rows of each split (made by encode, when given),
    cut into the planned one-row-group files of that split.

    Each file is written under a hidden name unique to the task attempt and renamed when complete, so a
    failed or speculative attempt never leaves a partial file under a dataset name.
    """

    def write(batches):
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        from sparkml_par.spark_runtime.python_worker import prepare_worker

        prepare_worker()
        task = TaskContext.get()
        writers = {split: _FileCutter(urls[split], sizes[split].get(task.partitionId(), []), task) for split in sizes}
        for batch in batches:
            table = pa.Table.from_batches([batch])
            if encode is not None:
                table = encode(table)
            for split, writer in writers.items():
                # A job of one split was given only that split's rows (write_splits selects them): no filter.
                rows = table if len(writers) == 1 else table.filter(pc.equal(table[SPLIT], split))
                yield from writer.add(rows.drop_columns([SPLIT]))
        for writer in writers.values():
            writer.check_complete()

    return write


class _FileCutter:
    """One task's rows of one split, written as they arrive into its planned files of one row group each."""

    def __init__(self, url: str, planned: list[int], task):
        self.url, self.planned, self.task = url, planned, task
        store = _dataset_store(url)
        self.fs, self.root = store.fs, store.root
        self.pending: list = []
        self.buffered = 0
        self.index = 0

    def add(self, table):
        """Buffers table's rows and writes each planned file they complete; yields a record of each."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.pending.append(table)
        self.buffered += table.num_rows
        while self.index < len(self.planned) and self.buffered >= self.planned[self.index]:
            size = self.planned[self.index]
            rows = pa.concat_tables(self.pending).combine_chunks()
            name = f"part-{self.task.partitionId():05d}-{self.index:05d}.parquet"
            temporary = f"{self.root}/.{name}.{self.task.taskAttemptId()}.tmp"
            pq.write_table(rows.slice(0, size), temporary, filesystem=self.fs, row_group_size=size, **_PARQUET_OPTIONS)
            self.fs.move(temporary, f"{self.root}/{name}")
            rest = rows.slice(size)
            self.pending, self.buffered = [rest], rest.num_rows
            self.index += 1
            yield pa.RecordBatch.from_pydict({"file": [f"{self.url}/{name}"]})

    def check_complete(self) -> None:
        held = sum(self.planned[: self.index]) + self.buffered
        if self.index != len(self.planned) or self.buffered:
            raise SparkmlParError(
                f"partition {self.task.partitionId()} of {self.url} held {held} rows, not the {sum(self.planned)} "
                f"counted before writing; is the input changing while it is being prepared?"
            )


def _remove_unfinished(fs, root: str) -> None:
    """Deletes files that failed task attempts left under hidden names."""
    import pyarrow.fs

    for info in fs.get_file_info(pyarrow.fs.FileSelector(root)):
        if info.base_name.startswith(".part-") and info.base_name.endswith(".tmp"):
            fs.delete_file(info.path)


def read_file_counts(url: str) -> dict[str, tuple[int, int]]:
    """(rows, row groups) of each Parquet file of a dataset, from the footers only."""
    import pyarrow.fs
    import pyarrow.parquet as pq

    store = _dataset_store(url)
    fs, root = store.fs, store.root
    paths = sorted(
        info.path
        for info in fs.get_file_info(pyarrow.fs.FileSelector(root))
        if info.base_name.endswith(".parquet") and not info.base_name.startswith(("_", "."))
    )

    def footer(path: str) -> tuple[str, tuple[int, int]]:
        with fs.open_input_file(path) as handle:
            meta = pq.read_metadata(handle)
        return path.rsplit("/", 1)[-1], (meta.num_rows, meta.num_row_groups)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(pool.map(footer, paths))
