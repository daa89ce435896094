"""A profile of the clean data, from the column summaries of Python tasks and Spark aggregates, written as JSON
next to the dataset."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from data_prep.summaries import summarize
from sparkml_par.config import ColumnSpec
from sparkml_par.contract import ROW_ID, SPLIT, column, quoted

# The rows a group of content_groups holds.
COPIES = "_copies"


def content_hash(columns: list[str]) -> str:
    """The SQL of a row's 64-bit hash of its content (`columns`): identical rows hash alike (Spark's hash, as
    its distinct, takes -0.0 for 0.0). Both counts of the repeated rows hash with it."""
    return f"xxhash64({', '.join(quoted(c) for c in columns)})"


def content_groups(df, columns: list[str]):
    """df's rows per row id and content (`columns`), with how many rows each group holds (COPIES): what
    prepare counts, drops or numbers the repeated rows from, one aggregate whose partial aggregation merges
    the copies inside each partition before they cross a shuffle."""
    from pyspark.sql import functions as F

    return df.groupBy(F.col(ROW_ID), *[column(c) for c in columns]).agg(F.count(F.lit(1)).alias(COPIES))


def count_duplicates(df, columns: list[str], rows: int) -> int:
    """Rows that repeat an earlier row's label and features exactly, of `rows` rows (df: those rows, or
    their content_groups), whole rows compared: prepare asks only where some rows share a 64-bit hash of
    their content (duplicates, or a collision)."""
    return rows - df.select(*[column(c) for c in columns]).distinct().count()


def drop_duplicates(df, columns: list[str]):
    """Keeps one row per content (df: the rows, or their content_groups); the smallest id wins so the
    result does not depend on partitioning."""
    from pyspark.sql import functions as F

    return df.groupBy(*[quoted(c) for c in columns]).agg(F.min(ROW_ID).alias(ROW_ID))


@dataclass
class ColumnStatistics:
    """Statistics of the clean rows: the profile's of each scalar column (over every row) with its
    approximate distinct count, and, for the numbers the feature pipeline reads, over the train split: its
    rows and per number (a column, or a part of a timestamp or date, as (column, part)) its values' count,
    mean, sample variance and approximate median (None unless asked for)."""

    rows: int
    columns: dict[str, dict[str, Any]]
    distinct: dict[str, int]
    train_rows: int = 0
    train: dict[tuple[str, str | None], tuple[int, float | None, float | None, float | None]] = field(
        default_factory=dict
    )
    # Where counted: rows per split, per split and Spark partition (which the writer plans each split's files
    # from), per class of the label (else None), and per text feature the train split's (value, rows), which
    # the feature pipeline's categories are made from.
    splits: dict[str, int] = field(default_factory=dict)
    partitions: dict[str, dict[int, int]] = field(default_factory=dict)
    classes: dict[str, int] | None = None
    categories: dict[str, list[tuple[str | None, int]]] = field(default_factory=dict)
    # Where asked for, the rows whose content's 64-bit hash an earlier row has (0: no duplicate).
    repeated: int | None = None


def profile(
    df,
    label: str,
    specs: list[ColumnSpec],
    statistics: ColumnStatistics | None = None,
) -> dict[str, Any]:
    """Count, nulls, min/max/mean/stddev, approximate distinct counts, and the label distribution (rows per
    class of a classification label) where the statistics counted the classes. `statistics`: the scalar
    columns' summaries when the caller made them (with the feature pipeline's numbers and the counts); the
    vector columns (one, alone, in a valid config) are an aggregate of their own."""
    if statistics is None:
        statistics = column_statistics(df, label, specs)
    columns = {name: dict(stats) for name, stats in statistics.columns.items()}
    for name, count in statistics.distinct.items():
        columns[name]["distinct"] = count
    vectors = [s.name for s in specs if s.type == "vector"]
    if vectors:
        columns.update(_vector_statistics(df, vectors))
    result = {"rows": statistics.rows, "columns": columns}
    if statistics.classes is not None:
        result["label_distribution"] = statistics.classes
    return result


def column_statistics(
    df,
    label: str,
    specs: list[ColumnSpec],
    numbers: list[tuple[str, str | None]] | None = None,
    medians: bool = False,
    counts: bool = False,
    classes: bool = False,
    repeated_over: list[str] | None = None,
) -> ColumnStatistics:
    """The profile's statistics of the label and the scalar feature columns and, when `numbers` is given
    (the feature pipeline's inputs: (column, None) for a number column, (column, part) for a part of a
    timestamp or date), the train split's rows (df's `_split`) and their statistics over it, with
    approximate medians when `medians`. With `counts`, df's rows per split, split and partition, class of
    the label (with `classes`) and value of each text feature in train. With `repeated_over` (columns), the
    rows that repeat an earlier row's 64-bit hash of those columns, as `job._repeated_rows` counts them.

    One pass of Python tasks summarizes every column and counts the rows (`summaries.summarize`); the
    medians, which a merge of summaries cannot give, are a Spark aggregate of a row of quantile sketches of
    their own.
    """
    from pyspark.sql.types import IntegralType

    numeric = [label] + [s.name for s in specs if s.type in ("float", "int", "bool")]
    strings = [s.name for s in specs if s.type in ("string", "timestamp", "date")]  # timestamps: distinct counts
    parts = [(name, part) for name, part in numbers or [] if part is not None]
    train = f"{SPLIT} = 'train'" if numbers is not None else "false"
    texts = [s.name for s in specs if s.type == "string"]
    key_sets = []
    if counts:
        key_sets = [[SPLIT, "spark_partition_id()"], *([[quoted(label)]] if classes else [])]
        key_sets += [[SPLIT, quoted(name)] for name in texts]
    summed = summarize(
        df,
        [quoted(name) for name in numeric] + [_number_sql(name, part) for name, part in parts],
        [quoted(name) for name in strings],
        train,
        key_sets,
        None if repeated_over is None else content_hash(repeated_over),
    )
    position = {(name, None): i for i, name in enumerate(numeric)}
    position.update({number: len(numeric) + i for i, number in enumerate(parts)})
    position.update({(name, None): len(numeric) + len(parts) + i for i, name in enumerate(strings)})
    integral = {f.name for f in df.schema.fields if isinstance(f.dataType, IntegralType)}
    columns: dict[str, dict[str, Any]] = {}
    for name in numeric + strings:
        summary = summed.columns[position[(name, None)]]
        if name in strings:
            columns[name] = {"nulls": summary.nulls}
            continue
        as_type = int if name in integral else float
        variance = summary.moments.variance
        columns[name] = {
            "nulls": summary.nulls,
            "min": None if summary.minimum is None else as_type(summary.minimum),
            "max": None if summary.maximum is None else as_type(summary.maximum),
            "mean": summary.moments.average,
            "stddev": None if variance is None else math.sqrt(variance),
        }
    median = _medians(df, list(numbers or [])) if medians and numbers else {}
    train_statistics = {}
    for number in numbers or []:
        moments = summed.columns[position[number]].train
        train_statistics[number] = (moments.count, moments.average, moments.variance, median.get(number))
    distinct = {name: summed.columns[position[(name, None)]].distinct for name in numeric + strings}
    train_rows = summed.train_rows if numbers is not None else 0
    statistics = ColumnStatistics(summed.rows, columns, distinct, train_rows, train_statistics)
    if repeated_over is not None:
        statistics.repeated = summed.repeated
    if counts:
        per_partition, *rest = summed.counts
        for (split, partition), n in sorted(per_partition.items()):
            statistics.splits[split] = statistics.splits.get(split, 0) + n
            statistics.partitions.setdefault(split, {})[partition] = n
        if classes:
            per_class, *rest = rest
            statistics.classes = {str(value): n for (value,), n in sorted(per_class.items())}
        statistics.categories = {
            name: [(value, n) for (split, value), n in per_value.items() if split == "train"]
            for name, per_value in zip(texts, rest)
        }
    return statistics


def _medians(df, numbers: list[tuple[str, str | None]]) -> dict[tuple[str, str | None], float | None]:
    """The approximate median over the train split of each number (as `column_statistics` names them), from
    one aggregate of a row of Spark's quantile sketches (with Spark ML's Imputer's relative error, 0.001)."""
    sketches = [
        f"percentile_approx(CAST({_number_sql(name, part)} AS DOUBLE), 0.5, 1000) FILTER (WHERE {SPLIT} = 'train')"
        for name, part in numbers
    ]
    row = df.selectExpr(*[f"{sql} AS `{i}`" for i, sql in enumerate(sketches)]).first()
    return {number: row[i] for i, number in enumerate(numbers)}


def _number_sql(name: str, part: str | None) -> str:
    """The SQL of a number the feature pipeline reads: the column, or a part of a timestamp or date."""
    return quoted(name) if part is None else f"{part}({quoted(name)})"


def _vector_statistics(df, vectors: list[str]) -> dict[str, dict[str, Any]]:
    """Statistics over all elements of each vector column; per-element sums come from one pass over each array."""
    wanted: list[tuple[str, str, str]] = []  # (column, statistic, SQL aggregate)
    for name in vectors:
        c = quoted(name)
        wanted += [
            (name, "nulls", f"count_if({c} IS NULL)"),
            (name, "min", f"min(array_min({c}))"),
            (name, "max", f"max(array_max({c}))"),
            (name, "sum", f"sum(aggregate({c}, 0D, (acc, x) -> acc + x))"),
            (name, "squares", f"sum(aggregate({c}, 0D, (acc, x) -> acc + x * x))"),
            (name, "elements", f"sum(size({c}))"),
        ]
    row = df.selectExpr(*[f"{sql} AS _{i}" for i, (_, _, sql) in enumerate(wanted)]).first()
    columns: dict[str, dict[str, Any]] = {}
    for i, (name, stat, _) in enumerate(wanted):
        columns.setdefault(name, {})[stat] = row[f"_{i}"]
    for name in vectors:
        _vector_moments(columns[name])
    return columns


def class_warnings(distribution: dict[str, int], num_classes: int, classes: list[str] | None) -> list[str]:
    """What a user should know about the classes: ids in 0..K-1 that no row has (one stray label value
    makes K larger), and classes with under a tenth of the rows of the average class that has rows."""
    counts = {int(label): n for label, n in distribution.items()}
    named = (lambda k: f"{k} ({classes[k]!r})") if classes else str
    warnings = []
    empty = [k for k in range(num_classes) if k not in counts]
    if empty:
        warnings.append(
            f"class ids {', '.join(map(named, empty))} of 0..{num_classes - 1} have no rows; the model "
            f"still has {num_classes} outputs (a stray label value, or set data.num_classes)"
        )
    average = sum(counts.values()) / max(len(counts), 1)
    rare = {k: n for k, n in sorted(counts.items()) if n < 0.1 * average}
    if rare:
        warnings.append(
            "classes with very few rows: "
            + ", ".join(f"{named(k)}: {n} rows" for k, n in rare.items())
            + f" (the average class has {average:.0f}); check the label column for stray values"
        )
    return warnings


def _vector_moments(column: dict[str, Any]) -> None:
    total, squares, n = column.pop("sum"), column.pop("squares"), column.pop("elements")
    if not n:
        column.update(mean=None, stddev=None)
        return
    mean = total / n
    column.update(mean=mean, stddev=max(squares / n - mean * mean, 0.0) ** 0.5 if n > 1 else None, elements=n)
