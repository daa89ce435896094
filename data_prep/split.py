"""Deterministic train/validation/test assignment and unique row ids.

A row's split depends only on a hash of its key (data.split.key, or the row id) and data.split.seed,
never on partitioning, cluster size or input format, so re-runs, other clusters and the same rows as
CSV, JSON lines or Parquet produce the same splits.
"""

from __future__ import annotations

from data_prep.ingest import canonical_values
from data_prep.profile import COPIES
from sparkml_par.config import DataConfig
from sparkml_par.contract import ROW_ID, SPLIT, column

_BUCKETS = 1_000_000
# The rows that earlier groups of the same row id hold (copy_offsets).
OFFSET = "_offset"


def assign_splits(df, cfg: DataConfig):
    """Adds `_split`: the key's hash, salted with the seed, falls into one of three fraction ranges."""
    from pyspark.sql import functions as F

    s = cfg.split
    key = canonical_values(df, [s.key]) if s.key else [F.col(ROW_ID)]
    position = F.pmod(F.xxhash64(F.lit(s.seed), *key), F.lit(_BUCKETS)) / _BUCKETS
    return df.withColumn(
        SPLIT,
        F.when(position < s.train, "train").when(position < s.train + s.validation, "validation").otherwise("test"),
    )


def copy_offsets(groups, columns: list[str]):
    """`groups` (profile.content_groups: rows per row id and content, with their count) with OFFSET: the
    rows that groups sharing the id (contents whose hashes collide) hold before it, in content order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    earlier = Window.partitionBy(ROW_ID).orderBy(*[column(c) for c in columns])
    earlier = earlier.rowsBetween(Window.unboundedPreceding, -1)
    return groups.withColumn(OFFSET, F.coalesce(F.sum(COPIES).over(earlier), F.lit(0)))


def numbered_copies(offsets, columns: list[str]):
    """Every row again from `offsets` (copy_offsets' groups), each with an id of its own: identical raw rows
    share a content-hash id, and the n-th row of an id gets a hash of the id and n, so every id names one
    row whatever the partitioning. The rows are made again from their groups, where a window over every
    row would sort them all."""
    from pyspark.sql import functions as F

    copy = F.explode(F.sequence(F.lit(1), F.col(COPIES).cast("int"))).alias("_copy")
    occurrence = (F.col(OFFSET) + F.col("_copy")).cast("int")
    renumbered = F.when(occurrence == 1, F.col(ROW_ID)).otherwise(F.xxhash64(F.col(ROW_ID), occurrence))
    return offsets.select("*", copy).select(renumbered.alias(ROW_ID), *[column(c) for c in columns])
