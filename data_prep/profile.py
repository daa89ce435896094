"""A profile of the clean data, computed by Spark aggregates and written as JSON next to the dataset."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkml_par.config import ColumnSpec
from sparkml_par.contract import ROW_ID, SPLIT, column, quoted

# Relative error of the profile's approximate distinct counts (Spark's default is 0.05). The counts are
# only reported; at 0.1 the HyperLogLog++ sketch of each column has a quarter of the registers, so an
# aggregate over many columns builds and merges far smaller sketches.
DISTINCT_RSD = 0.1
# Values (rows times scalar columns) from which the sketches leave the statistics' aggregate for one of their
# own (see `column_statistics`): on fewer, a second job costs more than the interpreted aggregate saves.
SKETCHES_APART_VALUES = 1_000_000
# The rows a group of content_groups holds.
COPIES = "_copies"


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
    """Statistics of the clean rows: the profile's of each scalar column (over every row), and, for the
    numbers the feature pipeline reads, over the train split: its rows and per number (a column, or a part
    of a timestamp or date, as (column, part)) its values' count, mean, sample variance and approximate
    median (None unless asked for). The columns' approximate distinct counts where the same aggregate
    counted them (else None: the profile counts them)."""

    rows: int
    columns: dict[str, dict[str, Any]]
    train_rows: int = 0
    train: dict[tuple[str, str | None], tuple[int, float | None, float | None, float | None]] = field(
        default_factory=dict
    )
    distinct: dict[str, int] | None = None


def profile(
    df,
    label: str,
    specs: list[ColumnSpec],
    label_distribution: dict[str, int] | None,
    statistics: ColumnStatistics | None = None,
) -> dict[str, Any]:
    """Count, nulls, min/max/mean/stddev, approximate distinct counts, and the label distribution (rows per
    class of a classification label, counted by the caller together with the splits). `statistics`: the
    scalar columns' aggregate when the caller made it (with the feature pipeline's numbers); the distinct
    counts and the vector columns (one, alone, in a valid config) are aggregates of their own."""
    if statistics is None:
        statistics = column_statistics(df, label, specs)
    columns = {name: dict(stats) for name, stats in statistics.columns.items()}
    distinct = statistics.distinct if statistics.distinct is not None else _sketches(df, list(columns))[0]
    for name, count in distinct.items():
        columns[name]["distinct"] = count
    vectors = [s.name for s in specs if s.type == "vector"]
    if vectors:
        columns.update(_vector_statistics(df, vectors))
    result = {"rows": statistics.rows, "columns": columns}
    if label_distribution is not None:
        result["label_distribution"] = label_distribution
    return result


def column_statistics(
    df,
    label: str,
    specs: list[ColumnSpec],
    numbers: list[tuple[str, str | None]] | None = None,
    medians: bool = False,
    rows: int = 0,
) -> ColumnStatistics:
    """The profile's statistics of the label and the scalar feature columns and, when `numbers` is given
    (the feature pipeline's inputs: (column, None) for a number column, (column, part) for a part of a
    timestamp or date), the train split's rows (df's `_split`) and their statistics over it, with
    approximate medians when `medians`; `rows`: df's rows where the caller knows them.

    The columns are unpivoted into one long (column, value) table and aggregated per column: the plan
    holds a dozen aggregates whatever the width. Six aggregates per column in one wide row would instead
    cost more in Spark than the data: the wide plan's code generation, its large task binary and its
    execution. Each column becomes a struct of a double `d` (numbers) and a string `s` (text); its position
    names it, so any column name works, and the whole plan is two SQL strings (one Py4J call each).

    Sketches (the median's, the distinct count's) are aggregates Spark generates no code for, which keeps
    the whole aggregate out of code generation; a row of them per column (`_sketches`) costs far less than
    a sketch per row of the unpivoted table. So on many values the sketches leave the aggregate: the
    medians with the distinct counts in one row of sketches, or without medians the distinct counts left
    to the profile.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegralType

    numeric = [label] + [s.name for s in specs if s.type in ("float", "int", "bool")]
    strings = [s.name for s in specs if s.type in ("string", "timestamp", "date")]  # timestamps: distinct counts
    parts = [(name, part) for name, part in numbers or [] if part is not None]
    scalar = numeric + strings
    medians_of = list(numbers or []) if medians else []
    values = [_scalar_value(quoted(name), text=name in strings) for name in scalar]
    values += [_scalar_value(f"{part}({quoted(name)})", text=False) for name, part in parts]
    selected = [f"{value} AS `{i}`" for i, value in enumerate(values)]
    train = f"{SPLIT} = 'train'" if numbers is not None else "false"
    long = df.selectExpr(f"{train} AS _train", *selected).unpivot(
        ["_train"], [str(i) for i in range(len(values))], "column", "value"
    )
    apart = rows * len(scalar) >= SKETCHES_APART_VALUES
    aggregates = [
        "count(1) AS rows",
        "count_if(value.d IS NULL AND value.s IS NULL) AS nulls",
        "min(value.d) AS min",
        "max(value.d) AS max",
        "avg(value.d) AS mean",
        "stddev(value.d) AS stddev",
    ]
    if numbers is not None:
        aggregates += [
            "count_if(_train) AS train_rows",
            "count(value.d) FILTER (WHERE _train) AS train_values",
            "avg(value.d) FILTER (WHERE _train) AS train_mean",
            "var_samp(value.d) FILTER (WHERE _train) AS train_variance",
        ]
    if not apart:
        aggregates += [
            f"approx_count_distinct(value.d, {DISTINCT_RSD}) AS numbers",
            f"approx_count_distinct(value.s, {DISTINCT_RSD}) AS texts",
        ]
        if medians_of:  # Spark's Imputer's relative error for its approximate median (1 / 0.001)
            aggregates.append("percentile_approx(value.d, 0.5, 1000) FILTER (WHERE _train) AS train_median")
    found = {int(r["column"]): r for r in long.groupBy("column").agg(*[F.expr(a) for a in aggregates]).collect()}
    # A frame without rows aggregates to no row at all: what a global aggregate of no rows gives.
    empty = {"rows": 0, "nulls": 0, "min": None, "max": None, "mean": None, "stddev": None, "numbers": 0, "texts": 0}
    empty.update(train_rows=0, train_values=0, train_mean=None, train_variance=None, train_median=None)
    position = {(name, None): i for i, name in enumerate(scalar)}
    position.update({number: len(scalar) + i for i, number in enumerate(parts)})
    distinct, median = None, {}
    if not apart:
        distinct = {
            name: found.get(i, empty)["texts" if name in strings else "numbers"] for i, name in enumerate(scalar)
        }
        median = {number: found.get(position[number], empty)["train_median"] for number in medians_of}
    elif medians_of:
        distinct, median = _sketches(df, scalar, medians_of)
    integral = {f.name for f in df.schema.fields if isinstance(f.dataType, IntegralType)}
    columns: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(scalar):
        r = found.get(i, empty)
        if name in strings:
            columns[name] = {"nulls": r["nulls"]}
            continue
        as_type = int if name in integral else float
        columns[name] = {
            "nulls": r["nulls"],
            "min": None if r["min"] is None else as_type(r["min"]),
            "max": None if r["max"] is None else as_type(r["max"]),
            "mean": r["mean"],
            "stddev": r["stddev"],
        }
    train = {}
    for number in numbers or []:
        r = found.get(position[number], empty)
        train[number] = (r["train_values"], r["train_mean"], r["train_variance"], median.get(number))
    label = found.get(0, empty)  # position 0, the label, is always there
    train_rows = label["train_rows"] if numbers is not None else 0
    return ColumnStatistics(label["rows"], columns, train_rows, train, distinct)


def _sketches(
    df, distinct_of: list[str], medians_of: list[tuple[str, str | None]] = ()
) -> tuple[dict[str, int], dict[tuple[str, str | None], float | None]]:
    """The approximate distinct count of each column in `distinct_of` and the approximate median over the
    train split of each number in `medians_of` (as `column_statistics` names them), from one aggregate of a
    row of sketches over df's rows as they are."""
    sketches = [f"approx_count_distinct({quoted(name)}, {DISTINCT_RSD})" for name in distinct_of]
    for name, part in medians_of:
        value = quoted(name) if part is None else f"{part}({quoted(name)})"
        sketches.append(f"percentile_approx(CAST({value} AS DOUBLE), 0.5, 1000) FILTER (WHERE {SPLIT} = 'train')")
    row = df.selectExpr(*[f"{sql} AS `{i}`" for i, sql in enumerate(sketches)]).first()
    distinct = {name: row[i] for i, name in enumerate(distinct_of)}
    return distinct, {number: row[len(distinct_of) + i] for i, number in enumerate(medians_of)}


def _scalar_value(sql: str, *, text: bool) -> str:
    """A column's SQL as the unpivoted struct: its number in `d` or its text in `s`, the other field null."""
    if text:
        return f"named_struct('d', CAST(NULL AS DOUBLE), 's', CAST({sql} AS STRING))"
    return f"named_struct('d', CAST({sql} AS DOUBLE), 's', CAST(NULL AS STRING))"


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
