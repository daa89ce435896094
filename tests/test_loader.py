"""A rank's loader (`ShardBatches`) over real petastorm readers of plain Parquet files: no Spark needed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from sparkml_par.errors import SparkmlParError
from sparkml_par.train.data import ShardBatches

WIDTH = 3


def _write(folder: Path, files: list[list[int]], vectors=None) -> str:
    """One file (one row group) per list of row ids; row i's features are [i, 2i, 3i] and its label is i."""
    folder.mkdir()
    for number, ids in enumerate(files):
        features = vectors(ids) if vectors else [[float(i * k) for k in range(1, WIDTH + 1)] for i in ids]
        table = pa.table({"features": pa.array(features, pa.list_(pa.float32())), "label": pa.array(ids, pa.int64())})
        pq.write_table(table, folder / f"part-{number:05d}.parquet")
    return f"file://{folder}"


def _loader(url: str, rank: int = 0, size: int = 2, **options) -> ShardBatches:
    return ShardBatches(url, rank, size, 16, label="label", shuffle=True, seed=3, shuffle_buffer=32, **options)


@pytest.mark.parametrize("cache", [False, True])
def test_an_epoch_draws_each_row_of_its_shard_once_with_its_own_features(tmp_path, cache):
    # Rank 0 of 2 reads row groups 0 and 2: rows 0-99 and 200-299; 200 // 16 = 12 batches per epoch.
    url = _write(tmp_path / "data", [list(range(start, start + 100)) for start in range(0, 400, 100)])
    shard = set(range(0, 100)) | set(range(200, 300))
    loader = _loader(url, cache=cache)

    epochs = []
    for epoch in (0, 1, 0):
        labels = []
        for x, y in loader.epoch(epoch, 200 // 16):
            assert x.dtype == torch.float32 and x.shape == (16, WIDTH) and x.numpy().flags.writeable
            assert y.numpy().flags.writeable
            np.testing.assert_array_equal(x.numpy(), np.outer(y.numpy(), np.arange(1, WIDTH + 1)))
            labels.extend(y.tolist())
        assert len(labels) == len(set(labels)) == 192 and set(labels) <= shard
        epochs.append(labels)
    assert epochs[0] == epochs[2] != epochs[1]  # seeded by epoch
    # The buffer holds 32 rows of the first row group back and mixes them with the second's.
    assert {label // 100 for label in epochs[0][64:96]} == {0, 2}


def test_a_shard_smaller_than_the_epoch_is_read_again(tmp_path):
    # Rank 1 of 2 has row group 1 only (20 rows); the epoch asks for 5 batches of 16.
    url = _write(tmp_path / "data", [list(range(0, 100)), list(range(100, 120))])
    labels = [label for _, y in _loader(url, rank=1).epoch(0, 5) for label in y.tolist()]
    assert len(labels) == 80 and set(labels) == set(range(100, 120))


def test_evaluation_reads_the_shard_once_in_file_order_as_writable_tensors(tmp_path):
    url = _write(tmp_path / "data", [list(range(0, 20)), list(range(100, 110)), list(range(200, 220))])
    batches = list(_loader(url).all_rows())  # rank 0 of 2: row groups 0 and 2
    assert [len(y) for _, y in batches] == [16, 4, 16, 4]
    assert [label for _, y in batches for label in y.tolist()] == [*range(0, 20), *range(200, 220)]
    assert all(x.numpy().flags.writeable and y.numpy().flags.writeable for x, y in batches)


def test_vectors_of_unequal_length_are_refused_by_name(tmp_path):
    url = _write(tmp_path / "data", [[0, 1, 2], [3, 4]], vectors=lambda ids: [[1.0] * (2 + i % 2) for i in ids])
    with pytest.raises(SparkmlParError, match=r"column 'features' of .* holds vectors of lengths 2 to 3"):
        next(_loader(url, size=1).epoch(0, 1))


def test_a_rank_whose_row_groups_are_empty_is_named(tmp_path):
    # petastorm itself refuses fewer row groups than ranks; an empty row group is read as no rows at all.
    url = _write(tmp_path / "data", [list(range(40)), []])
    with pytest.raises(SparkmlParError, match="rank 1 of 2 has no rows in"):
        next(_loader(url, rank=1).epoch(0, 1))
