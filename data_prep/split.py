"""Deterministic train/validation/test assignment and unique row ids.

A row's split depends only on a hash of its key (data.split.key, or the row id) and data.split.seed,
never on partitioning, cluster size or input format, so re-runs, other clusters and the same rows as
CSV, JSON lines or Parquet produce the same splits.
"""

from __future__ import annotations

from data_prep.ingest import canonical_values
from sparkml_par.config import DataConfig
from sparkml_par.contract import ROW_ID, SPLIT

_BUCKETS = 1_000_000


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


def make_row_ids_unique(df):
    """Identical raw rows share a content-hash id; number them so every id names one row.

    Rows sharing an id are identical, so their order inside the window does not matter.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    occurrence = F.row_number().over(Window.partitionBy(ROW_ID).orderBy(ROW_ID))
    return df.withColumn(
        ROW_ID, F.when(occurrence == 1, F.col(ROW_ID)).otherwise(F.xxhash64(F.col(ROW_ID), occurrence))
    )
