"""Column summaries and row counts from one pass of Python tasks over Arrow batches, merged on the driver.

Per column: its values (non-null), nulls, minimum, maximum, mean and sum of squared deviations from the
mean, the same moments over the rows a boolean column marks (the train split), and a HyperLogLog sketch of
its distinct values. Per set of keys (SQL expressions: the split and Spark partition, a label, a text
column): the rows of each combination of their values, null a value as any other. Where asked, the
distinct values of a 64-bit hash of each row's content, which tell the rows that repeat an earlier one.
Moments are merged across batches and tasks by Chan, Golub and LeVeque's pairwise update (as stable as
Spark's own central moments); sketches by the registers' maximum; counts by their sum; hashes by union.
In the JVM the same figures took an aggregate over the columns unpivoted into rows and another of Spark's
sketches, which Spark runs interpreted, the counts an aggregate over grouping sets and the repeated rows
one of their own; numpy and Arrow's group-by over Arrow batches, in the Python workers prepare starts for
its write anyway, cost less.
"""

from __future__ import annotations

import math
import pickle
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

# 2**PRECISION HyperLogLog registers (bytes) per column: a distinct count's relative error is about
# 1.04 / sqrt(2**PRECISION), 1.6 %.
PRECISION = 12
_REGISTERS = 1 << PRECISION
# Ranks a register holds, 0 (empty) to 31: a rank of 31 or more is a chance of 2**-30 a value, and at 31 a
# register still tells about 4096 * 2**31 distinct values apart. A task keeps a bit per register and rank.
_RANKS = 32
# HyperLogLog's bias correction for this many registers (Flajolet et al. 2007).
_ALPHA = 0.7213 / (1 + 1.079 / _REGISTERS)
# Up to this many distinct values a column's summary keeps their hashes and counts them exactly (a category
# column's few values are what a profile's reader checks); past it, the registers estimate.
EXACT_UP_TO = 1024


@dataclass
class Moments:
    """Count, mean and sum of squared deviations from the mean of some values."""

    count: int = 0
    mean: float = 0.0
    squares: float = 0.0

    def add(self, values: np.ndarray) -> None:
        if values.size:
            mean = float(values.mean())
            deviations = values - mean
            self.merge(Moments(int(values.size), mean, float(deviations @ deviations)))

    def merge(self, other: Moments) -> None:
        if not other.count:
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.mean += delta * other.count / total
        self.squares += other.squares + delta * delta * self.count * other.count / total
        self.count = total

    @property
    def average(self) -> float | None:
        return self.mean if self.count else None

    @property
    def variance(self) -> float | None:
        """The sample variance, None below two values (as Spark's var_samp)."""
        return self.squares / (self.count - 1) if self.count > 1 else None


@dataclass
class ColumnSummary:
    """One column's summary; a text column has no bounds or moments. `hashes`: its values' distinct hashes
    while they are at most EXACT_UP_TO, else None."""

    nulls: int = 0
    minimum: float | None = None
    maximum: float | None = None
    moments: Moments = field(default_factory=Moments)
    train: Moments = field(default_factory=Moments)
    registers: np.ndarray = field(default_factory=lambda: np.zeros(_REGISTERS, np.uint8))
    hashes: np.ndarray | None = field(default_factory=lambda: np.zeros(0, np.uint64))

    @property
    def distinct(self) -> int:
        """The distinct values: counted where their hashes were kept, else HyperLogLog's estimate (by linear
        counting where registers are empty)."""
        if self.hashes is not None:
            return len(self.hashes)
        empty = int(np.count_nonzero(self.registers == 0))
        estimate = _ALPHA * _REGISTERS * _REGISTERS / float(np.sum(np.ldexp(1.0, -self.registers.astype(np.int64))))
        if estimate <= 2.5 * _REGISTERS and empty:
            estimate = _REGISTERS * math.log(_REGISTERS / empty)
        return round(estimate)

    def widen(self, low: float, high: float) -> None:
        """Takes values from low to high into the bounds."""
        self.minimum = low if self.minimum is None else min(self.minimum, low)
        self.maximum = high if self.maximum is None else max(self.maximum, high)

    def merge(self, other: ColumnSummary) -> None:
        self.nulls += other.nulls
        if other.minimum is not None:  # the bounds are both set or both None
            self.widen(other.minimum, other.maximum)
        self.moments.merge(other.moments)
        self.train.merge(other.train)
        np.maximum(self.registers, other.registers, out=self.registers)
        self.add_hashes(other.hashes)

    def add_hashes(self, hashes: np.ndarray | None) -> None:
        """Keeps the union of the distinct hashes while it is at most EXACT_UP_TO (None: not kept)."""
        if self.hashes is not None:
            self.hashes = None if hashes is None else np.union1d(self.hashes, hashes)
            if self.hashes is not None and len(self.hashes) > EXACT_UP_TO:
                self.hashes = None


@dataclass
class Summaries:
    """The rows, the marked (train) rows and each column's summary."""

    rows: int = 0
    train_rows: int = 0
    columns: list[ColumnSummary] = field(default_factory=list)
    # Per set of keys, the rows of each combination of their values (a tuple).
    counts: list[Counter[tuple]] = field(default_factory=list)
    # The distinct row hashes, sorted, where they were asked for.
    row_hashes: np.ndarray | None = None

    @property
    def repeated(self) -> int:
        """The rows whose hash an earlier row has (0: no row repeats another)."""
        return self.rows - len(self.row_hashes)

    @classmethod
    def of_columns(cls, width: int, key_sets: int = 0) -> Summaries:
        """The summaries of `width` columns and `key_sets` sets of keys before any row."""
        return cls(columns=[ColumnSummary() for _ in range(width)], counts=[Counter() for _ in range(key_sets)])

    def merge(self, other: Summaries) -> None:
        self.rows += other.rows
        self.train_rows += other.train_rows
        for mine, theirs in zip(self.columns, other.columns):
            mine.merge(theirs)
        for mine, theirs in zip(self.counts, other.counts):
            mine.update(theirs)
        if other.row_hashes is not None:
            self.row_hashes = np.union1d(self.row_hashes, other.row_hashes)


def summarize(
    df,
    numbers: list[str],
    texts: list[str],
    train: str,
    key_sets: Sequence[Sequence[str]] = (),
    row_hash: str | None = None,
) -> Summaries:
    """Summaries of the SQL expressions `numbers` (read as doubles) and then `texts` (as strings) over df's
    rows, with the moments over the rows where the SQL condition `train` holds, the rows per combination
    of the values of each set of SQL expressions in `key_sets` (`spark_partition_id()` is df's partition)
    and the distinct values of the 64-bit SQL expression `row_hash`, where given (8 bytes a row reach the
    driver): one Spark job of Python tasks, a summary per task."""
    selected = [f"COALESCE({train}, false) AS _train"]
    selected += [f"CAST({sql} AS DOUBLE) AS `{i}`" for i, sql in enumerate(numbers)]
    selected += [f"CAST({sql} AS STRING) AS `{len(numbers) + i}`" for i, sql in enumerate(texts)]
    width = len(numbers) + len(texts)
    keys = list(dict.fromkeys(sql for sql_set in key_sets for sql in sql_set))
    selected += [f"{sql} AS `{width + i}`" for i, sql in enumerate(keys)]
    hashed = None
    if row_hash is not None:
        hashed = 1 + width + len(keys)
        selected.append(f"{row_hash} AS `{width + len(keys)}`")
    key_positions = [[1 + width + keys.index(sql) for sql in sql_set] for sql_set in key_sets]
    task = _SummaryTask(len(numbers), width, key_positions, hashed)
    total = Summaries.of_columns(width, len(key_sets))
    if row_hash is not None:
        total.row_hashes = np.zeros(0, np.int64)
    # A task a core at most (each reads several partitions where there are more): the driver merges one
    # summary a task, whatever the partitions. The keys are taken before, so a partition's id is df's own.
    rows = df.selectExpr(*selected).coalesce(df.sparkSession.sparkContext.defaultParallelism)
    for row in rows.mapInArrow(task, "summaries binary").collect():
        total.merge(pickle.loads(row[0]))
    return total


class _SummaryTask:
    """What each task runs: its batches summarized into one pickled row. The ranks each register has seen
    are kept as bits while the batches come (setting a bit costs the same however often it is set) and
    turned into registers once; the row hashes (at position `hashed`) are kept and made distinct once."""

    def __init__(self, numbers: int, width: int, key_sets: list[list[int]] = (), hashed: int | None = None):
        self.numbers, self.width, self.key_sets, self.hashed = numbers, width, key_sets, hashed

    def __call__(self, batches):
        import pyarrow as pa

        total = Summaries.of_columns(self.width, len(self.key_sets))
        seen = [np.zeros(_REGISTERS * _RANKS, bool) for _ in range(self.width)]
        row_hashes = [np.zeros(0, np.int64)]
        for batch in batches:
            if self.hashed is not None:
                row_hashes.append(batch.column(self.hashed).to_numpy())
            train = batch.column(0).to_numpy(zero_copy_only=False).astype(bool)
            total.rows += batch.num_rows
            total.train_rows += int(np.count_nonzero(train))
            for counts, positions in zip(total.counts, self.key_sets):
                counts.update(_key_counts(batch, positions))
            for i, summary in enumerate(total.columns):
                array = batch.column(i + 1)
                summary.nulls += array.null_count
                if i < self.numbers:
                    hashes = _add_numbers(summary, array, train)
                else:
                    hashes = _text_hashes(array)
                seen[i][_register_ranks(hashes)] = True
                summary.add_hashes(hashes)
        for summary, ranks in zip(total.columns, seen):
            summary.registers = _registers(ranks)
        if self.hashed is not None:
            total.row_hashes = np.unique(np.concatenate(row_hashes))
        yield pa.RecordBatch.from_pydict({"summaries": [pickle.dumps(total)]})


def _key_counts(batch, positions: list[int]) -> dict[tuple, int]:
    """The batch's rows per combination of the values of its columns at `positions`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = [str(i) for i in range(len(positions))]
    keys = pa.Table.from_arrays([batch.column(i) for i in positions], names=names)
    grouped = keys.group_by(names).aggregate([(names[0], "count", pc.CountOptions(mode="all"))])
    values = [grouped.column(name).to_pylist() for name in names]
    return dict(zip(zip(*values), grouped.column(f"{names[0]}_count").to_pylist()))


def _add_numbers(summary: ColumnSummary, array, train: np.ndarray) -> np.ndarray:
    """Adds a batch's numbers to the summary; returns their hashes."""
    values = array.to_numpy(zero_copy_only=False)
    if array.null_count:
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        values, train = values[valid], train[valid]
    if values.size:
        summary.widen(float(values.min()), float(values.max()))
        summary.moments.add(values)
        summary.train.add(values[train])
    # splitmix64 of the bits (+ 0.0 makes -0.0 the 0.0 it equals): every bit of a value moves every bit of its hash.
    bits = (values + 0.0).view(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    bits ^= bits >> np.uint64(30)
    bits *= np.uint64(0xBF58476D1CE4E5B9)
    bits ^= bits >> np.uint64(27)
    bits *= np.uint64(0x94D049BB133111EB)
    return bits ^ (bits >> np.uint64(31))


def _text_hashes(array) -> np.ndarray:
    """64-bit hashes of a batch's texts (not its nulls), the same in every process: pandas' hash of each
    distinct text, which a dictionary of the batch's values holds once."""
    import pyarrow.compute as pc
    from pandas.util import hash_array

    encoded = pc.dictionary_encode(array.drop_null())
    if not len(encoded):
        return np.zeros(0, np.uint64)
    hashed = hash_array(encoded.dictionary.to_numpy(zero_copy_only=False), categorize=False)
    return hashed[encoded.indices.to_numpy()]


def _register_ranks(hashes: np.ndarray) -> np.ndarray:
    """Each hash's (register, rank) as one position in a register-by-rank table: the register is the hash's
    top PRECISION bits, the rank the leading zeros of the bits after them, plus one."""
    index = (hashes >> np.uint64(64 - PRECISION)).astype(np.int64)
    # A set bit below the rank's bits bounds the rank where they are all zero.
    rest = (hashes << np.uint64(PRECISION)) | np.uint64(1 << (PRECISION - 1))
    rank = 64 - np.floor(np.log2(rest.astype(np.float64))).astype(np.int64)
    return index * _RANKS + np.minimum(rank, _RANKS - 1)


def _registers(seen: np.ndarray) -> np.ndarray:
    """Each register's highest rank seen (0: none) from the register-by-rank table."""
    table = seen.reshape(_REGISTERS, _RANKS)
    highest = _RANKS - 1 - np.argmax(table[:, ::-1], axis=1)
    return np.where(table.any(axis=1), highest, 0).astype(np.uint8)
