"""Column summaries from Python tasks: the exact counts, bounds and moments of every column merged across
tasks, and distinct counts within HyperLogLog's error, with each text hashed alike in every worker."""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pytest

from data_prep.summaries import EXACT_UP_TO, Moments, _SummaryTask, summarize


def _summaries_of(numbers: np.ndarray, texts: list[str | None], train: np.ndarray, batch_rows: int = 10_000):
    """What one task makes of these columns, cut into Arrow batches of batch_rows."""
    batches = [
        pa.RecordBatch.from_arrays(
            [
                pa.array(train[i : i + batch_rows]),
                pa.array(numbers[i : i + batch_rows], from_pandas=True),  # NaN: a null, as Spark's nulls arrive
                pa.array(texts[i : i + batch_rows], pa.string()),
            ],
            names=["_train", "0", "1"],
        )
        for i in range(0, len(numbers), batch_rows)
    ]
    (row,) = _SummaryTask(numbers=1, width=2)(iter(batches))
    return pickle.loads(row.column(0)[0].as_py())


@pytest.mark.parametrize("distinct", [0, 1, 7, 100, 1_024, 1_025, 5_000, 12_000, 20_000, 60_000, 300_000])
def test_distinct_counts_are_exact_up_to_a_limit_and_within_hyperloglogs_error_past_it(distinct):
    """Exact up to EXACT_UP_TO; past it HyperLogLog's estimate, on either side of its linear counting."""
    rng = np.random.default_rng(distinct)
    values = rng.permutation(np.resize(np.arange(distinct, dtype=np.float64) * 0.5, max(distinct * 2, 10)))
    if not distinct:
        values[:] = np.nan
    texts = [None if np.isnan(v) else f"id-{v}" for v in values]
    summary = _summaries_of(values, texts, np.ones(len(values), bool))
    for column in summary.columns:
        if distinct <= EXACT_UP_TO:
            assert column.distinct == distinct
        else:
            assert abs(column.distinct - distinct) <= 0.04 * distinct, (column.distinct, distinct)


def test_moments_merged_from_batches_keep_the_variance_of_large_numbers():
    """Chan's merge of per-batch moments: values about 1e9 apart by a few units keep their variance, which
    sums of squares would lose."""
    values = 1e9 + np.tile(np.array([1.0, 2.0, 3.0, 4.0]), 5_000)
    summary = _summaries_of(values, ["a"] * len(values), np.arange(len(values)) % 2 == 0, batch_rows=999).columns[0]
    assert summary.moments.count == 20_000 and summary.moments.average == pytest.approx(1e9 + 2.5, rel=1e-15)
    assert summary.moments.variance == pytest.approx(np.var(values, ddof=1), rel=1e-9)
    assert summary.train.count == 10_000 and summary.train.variance == pytest.approx(np.var(values[::2], ddof=1))
    assert Moments(1, 5.0, 0.0).variance is None and Moments().average is None


@pytest.mark.stack
def test_summaries_of_a_frame_over_several_workers_equal_the_exact_figures(spark):
    """Four partitions (four Python tasks): counts, nulls, bounds and moments as numpy computes them over
    all rows, the train moments over the marked rows, and texts that every partition holds counted once."""
    rng = np.random.default_rng(7)
    n = 4_000
    x = rng.normal(50.0, 10.0, n).round(2)
    x[::97] = np.nan
    zeros = np.where(np.arange(n) % 2 == 0, 0.0, -0.0)  # one value, whichever sign
    words = ["alpha", "beta", "gamma", None]
    rows = [
        (None if np.isnan(x[i]) else float(x[i]), float(zeros[i]), words[i % 4], "train" if i % 5 else "test")
        for i in range(n)
    ]
    df = spark.createDataFrame(rows, "x double, z double, w string, _split string").repartition(4)

    summed = summarize(df, ["x", "z"], ["w"], "_split = 'train'", [["_split", "w"], ["z < 0"]])

    valid = ~np.isnan(x)
    train = np.array([i % 5 != 0 for i in range(n)])
    assert summed.rows == n and summed.train_rows == int(train.sum())
    xs, zs, ws = summed.columns
    assert xs.nulls == int((~valid).sum()) and xs.minimum == x[valid].min() and xs.maximum == x[valid].max()
    assert xs.moments.count == int(valid.sum()) and xs.moments.average == pytest.approx(x[valid].mean(), rel=1e-12)
    assert xs.moments.variance == pytest.approx(np.var(x[valid], ddof=1), rel=1e-12)
    assert xs.train.count == int((valid & train).sum())
    assert xs.train.variance == pytest.approx(np.var(x[valid & train], ddof=1), rel=1e-12)
    assert abs(xs.distinct - len(np.unique(x[valid]))) <= 0.04 * len(np.unique(x[valid]))
    assert zs.distinct == 1 and zs.minimum == zs.maximum == 0.0 and zs.nulls == 0
    assert ws.distinct == 3 and ws.nulls == n // 4 and ws.moments.count == 0 and ws.minimum is None
    # The rows per split and text (a missing one a value as any other), and per value of an expression.
    per_split_and_word, per_sign = summed.counts
    expected = {}
    for _, _, word, split in rows:
        expected[(split, word)] = expected.get((split, word), 0) + 1
    assert per_split_and_word == expected and per_sign == {(False,): n}


def test_rows_repeating_a_content_hash_are_counted_across_tasks_as_sparks_aggregate_counts_them(spark):
    """Rows repeated within a partition and across partitions (four tasks): the distinct hashes merged on the
    driver give the count of _repeated_rows' aggregate, and a frame without repeats counts none."""
    from data_prep.job import _repeated_rows

    rows = spark.range(0, 400, 1, numPartitions=4).selectExpr("id", "id % 7 AS a", "CAST(id % 3 AS STRING) AS b")
    content = ["a", "b"]
    repeated = summarize(rows, ["a"], [], "false", row_hash="xxhash64(a, b)").repeated
    assert repeated == _repeated_rows(rows, content, 400) == 400 - 21
    assert summarize(rows, ["a"], [], "false", row_hash="xxhash64(id, a)").repeated == 0
    assert summarize(rows.where("false"), ["a"], [], "false", row_hash="xxhash64(a, b)").repeated == 0
    assert summarize(rows, ["a"], [], "false").row_hashes is None
