"""The petastorm writer: row-group layout, and a dataset that reads back identically everywhere."""

from __future__ import annotations

import io

import numpy as np
import pyarrow.parquet as pq
import pytest

from data_prep.write import group_sizes, plan_row_groups, write_split, write_splits
from sparkml_par.contract import SPLIT
from sparkml_par.errors import SparkmlParError

ROWS, DIMS = 1000, 5


@pytest.mark.parametrize(
    "counts, target_rows, max_shards",
    [
        ({0: 900, 1: 897}, 14_000, 8),  # digits-sized: one group per shard per partition
        ({0: 1_000_000, 1: 1_000_000}, 30_000, 8),  # benchmark-sized: ~30k-row groups
        ({0: 333_334, 1: 333_333, 2: 6}, 10_000, 6),  # unequal partitions, one barely big enough
        ({0: 9}, 1_000, 8),  # barely enough rows
    ],
)
def test_plan_cuts_every_partition_into_a_multiple_of_max_shards(counts, target_rows, max_shards):
    plan = plan_row_groups(counts, target_rows, max_shards)
    assert set(plan) == set(counts)
    for partition, groups in plan.items():
        assert groups % max_shards == 0 and groups <= counts[partition]
        sizes = group_sizes(counts[partition], groups)
        assert sum(sizes) == counts[partition] and max(sizes) - min(sizes) <= 1
        if counts[partition] >= target_rows * max_shards:
            assert max(sizes) <= target_rows and min(sizes) >= target_rows // 2


@pytest.mark.parametrize("shards", [1, 2, 3, 6])
def test_planned_files_give_every_shard_an_equal_share(shards):
    counts = {0: 333_334, 1: 333_333, 2: 100_007}
    plan = plan_row_groups(counts, 10_000, 6)
    files = [size for p in sorted(plan) for size in group_sizes(counts[p], plan[p])]
    shard_rows = [sum(files[s::shards]) for s in range(shards)]
    assert sum(shard_rows) == sum(counts.values())
    assert max(shard_rows) - min(shard_rows) <= len(files) // shards


def test_a_split_smaller_than_max_shards_is_refused(spark, tmp_path):
    df = spark.range(5).selectExpr("id AS _row_id", "id % 2 AS label")
    with pytest.raises(
        SparkmlParError,
        match=r"the test split has 5 rows, fewer than data.max_shards=8 .* "
        r"lower data.max_shards",
    ):
        write_split(spark, df, f"file://{tmp_path}/t", 5, shapes={}, row_group_mb=4.0, max_shards=8, split="test")


def _expected_features(ids: np.ndarray) -> np.ndarray:
    return (ids[:, None] * 0.5 + np.arange(DIMS)[None, :]).astype(np.float32)


@pytest.fixture(scope="module")
def written(spark, tmp_path_factory):
    """1,000 rows from 3 unequal input partitions, cut into small row groups for 4 shards."""
    from pyspark.sql import functions as F

    df = spark.range(0, ROWS, 1, numPartitions=3).select(
        F.col("id").alias("_row_id"),
        F.expr(f"transform(sequence(0, {DIMS - 1}), j -> CAST(id * 0.5 + j AS float))").alias("features"),
        (F.col("id") % 3).alias("label"),
    )
    url = "file://" + str(tmp_path_factory.mktemp("write") / "train")
    info = write_split(
        spark, df, url, ROWS, shapes={"features": (DIMS,)}, row_group_mb=0.001, max_shards=4, split="train"
    )
    return url, info


def test_layout_on_disk_matches_the_manifest_entry(written):
    url, info = written
    path = url[len("file://") :]
    sizes = []
    for name, rows in info["files"].items():
        meta = pq.read_metadata(f"{path}/{name}")
        assert meta.num_rows == rows and meta.num_row_groups == 1
        sizes.append(rows)
    assert len(sizes) == info["row_groups"] and len(sizes) % 4 == 0 and len(sizes) > 4
    assert sum(sizes) == ROWS and max(sizes) - min(sizes) <= 1


def test_reads_back_identically_through_pyarrow_and_spark(spark, written):
    url, _ = written
    table = pq.read_table(url[len("file://") :], columns=["_row_id", "features", "label"]).to_pydict()
    ids = np.array(table["_row_id"])
    order = np.argsort(ids)
    assert np.array_equal(ids[order], np.arange(ROWS))
    assert np.array_equal(np.array(table["features"], dtype=np.float32)[order], _expected_features(np.arange(ROWS)))
    assert np.array_equal(np.array(table["label"])[order], np.arange(ROWS) % 3)

    back = spark.read.parquet(url)
    assert back.count() == ROWS
    assert dict(back.dtypes) == {"_row_id": "bigint", "features": "array<float>", "label": "bigint"}
    mismatches = back.selectExpr(
        f"sum(CASE WHEN features = transform(sequence(0, {DIMS - 1}), j -> CAST(_row_id * 0.5 + j AS float)) "
        f"AND label = _row_id % 3 THEN 0 ELSE 1 END)"
    ).first()[0]
    assert mismatches == 0


@pytest.mark.parametrize("shards", [1, 2, 4])
def test_make_reader_shards_are_balanced_and_complete(written, shards):
    from petastorm import make_reader

    url, info = written
    per_group = -(-ROWS // info["row_groups"])
    seen, counts = [], []
    for shard in range(shards):
        with make_reader(url, reader_pool_type="dummy", num_epochs=1, cur_shard=shard, shard_count=shards) as reader:
            rows = list(reader)
        counts.append(len(rows))
        for row in rows:
            row_id = int(row.features[0] * 2)  # _row_id is not a petastorm field; features encode it
            assert set(row._fields) == {"features", "label"}
            assert row.features.dtype == np.float32 and row.features.shape == (DIMS,)
            assert np.array_equal(row.features, _expected_features(np.array([row_id]))[0])
            assert row.label == row_id % 3
            seen.append(row_id)
    assert sorted(seen) == list(range(ROWS))
    assert max(counts) - min(counts) <= per_group


@pytest.mark.parametrize("shards", [2, 4])
def test_make_batch_reader_shards_are_balanced_and_complete(written, shards):
    from petastorm import make_batch_reader

    url, info = written
    per_group = -(-ROWS // info["row_groups"])
    seen, counts = [], []
    for shard in range(shards):
        ids, features = [], []
        with make_batch_reader(
            url, reader_pool_type="dummy", num_epochs=1, cur_shard=shard, shard_count=shards
        ) as reader:
            for batch in reader:
                assert set(batch._fields) == {"features", "label"}
                assert np.array_equal(batch.label, (batch.features[:, 0] * 2).astype(np.int64) % 3)
                ids.append((batch.features[:, 0] * 2).astype(np.int64))
                features.append(batch.features)
        ids, features = np.concatenate(ids), np.concatenate(features)
        assert features.dtype == np.float32 and features.shape == (len(ids), DIMS)
        assert np.array_equal(features, _expected_features(ids))
        counts.append(len(ids))
        seen += ids.tolist()
    assert sorted(seen) == list(range(ROWS))
    assert max(counts) - min(counts) <= per_group


def test_large_split_from_many_partitions_gives_every_shard_an_equal_share(spark, tmp_path):
    """Many input partitions are merged without a shuffle, and each is cut into a multiple of 6 files."""
    from pyspark.sql import functions as F

    rows = 150_001
    df = spark.range(0, rows, 1, numPartitions=5).select(F.col("id").alias("_row_id"), (F.col("id") % 2).alias("label"))
    url = "file://" + str(tmp_path / "large")
    info = write_split(spark, df, url, rows, shapes={}, row_group_mb=0.1, max_shards=6)
    sizes = []
    for name in sorted(info["files"]):
        meta = pq.read_metadata(str(tmp_path / "large" / name))
        assert meta.num_row_groups == 1
        sizes.append(meta.num_rows)
    assert len(sizes) == info["row_groups"] and len(sizes) % 6 == 0 and len(sizes) > 6
    assert sum(sizes) == rows
    assert not [p for p in (tmp_path / "large").iterdir() if p.name.endswith(".tmp")]
    for shards in (2, 3, 6):
        shard_rows = [sum(sizes[s::shards]) for s in range(shards)]
        assert max(shard_rows) - min(shard_rows) <= len(sizes) // shards


def test_splits_are_written_together_and_one_with_a_partition_too_small_alone(spark, tmp_path):
    """train and validation from one job over the three partitions; test, 3 of whose 10 rows are in one
    partition (fewer than 4 shards), from one task of its own. Every row lands in its split's dataset once."""
    from pyspark.sql import functions as F

    df = spark.range(0, 1000, 1, numPartitions=3).select(
        F.col("id").alias("_row_id"),
        (F.col("id") % 2).alias("label"),
        F.when(F.col("id") % 100 == 0, "test")
        .when(F.col("id") % 10 == 1, "validation")
        .otherwise("train")
        .alias(SPLIT),
    )
    rows = {"train": 890, "validation": 100, "test": 10}
    urls = {split: "file://" + str(tmp_path / split) for split in rows}
    info = write_splits(spark, df, urls, rows, shapes={}, row_group_mb=0.001, max_shards=4)
    assert {split: i["rows"] for split, i in info.items()} == rows
    assert info["test"]["row_groups"] == 4 and all(name.startswith("part-00000-") for name in info["test"]["files"])
    assert info["train"]["row_groups"] % 4 == 0 and info["train"]["row_groups"] > 4
    for split, url in urls.items():
        ids = sorted(r[0] for r in spark.read.parquet(url).select("_row_id").collect())
        assert ids == sorted(r[0] for r in df.where(F.col(SPLIT) == split).select("_row_id").collect())
        assert sorted(info[split]["files"]) == sorted(p.name for p in (tmp_path / split).glob("part-*.parquet"))


def test_an_unwritable_scheme_names_the_output_and_the_fix(spark):
    df = spark.range(10).selectExpr("id AS _row_id", "id % 2 AS label")
    with pytest.raises(SparkmlParError, match=r"cannot write a dataset to 'nosuch://bucket/train'.*mounted path"):
        write_split(spark, df, "nosuch://bucket/train", 10, shapes={}, row_group_mb=4.0, max_shards=2)


def test_binary_and_string_columns_round_trip_through_make_reader(spark, tmp_path):
    """Encoded images (or any bytes) and text stay plain Parquet columns that petastorm returns as is."""
    from petastorm import make_reader
    from PIL import Image
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    images = [np.full((4, 6, 3), 10 * i, dtype=np.uint8) for i in range(8)]

    def png(pixels):
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="PNG")
        return bytearray(buffer.getvalue())

    schema = StructType(
        [
            StructField("index", LongType(), False),
            StructField("name", StringType()),
            StructField("image", BinaryType(), False),
        ]
    )
    df = spark.createDataFrame([(i, f"img{i}", png(img)) for i, img in enumerate(images)], schema)
    url = "file://" + str(tmp_path / "images")
    write_split(spark, df, url, 8, shapes={}, row_group_mb=4.0, max_shards=2)
    with make_reader(url, reader_pool_type="dummy", num_epochs=1) as reader:
        rows = list(reader)
    assert sorted(int(r.index) for r in rows) == list(range(8))
    for r in rows:
        assert r.name == f"img{r.index}"
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(r.image))), images[r.index])
