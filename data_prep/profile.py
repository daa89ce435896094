"""A profile of the clean data, computed by Spark aggregates and written as JSON next to the dataset."""

from __future__ import annotations

from typing import Any

from sparkml_par.config import ColumnSpec
from sparkml_par.contract import ROW_ID

# Relative error of the profile's approximate distinct counts (Spark's default is 0.05). The counts are
# only reported; at 0.1 the HyperLogLog++ sketch of each column has a quarter of the registers, and the
# aggregate of 128 columns x 5,000 rows took 0.8 s instead of 2.4 s.
DISTINCT_RSD = 0.1


def count_duplicates(df, columns: list[str], rows: int) -> int:
    """Rows that repeat an earlier row's label and features exactly, of df's `rows` rows."""
    return rows - df.select(*[f"`{c}`" for c in columns]).distinct().count()


def drop_duplicates(df, columns: list[str]):
    """Keeps one row per content; the smallest id wins so the result does not depend on partitioning."""
    from pyspark.sql import functions as F

    return df.groupBy(*[f"`{c}`" for c in columns]).agg(F.min(ROW_ID).alias(ROW_ID))


def profile(df, label: str, specs: list[ColumnSpec], label_distribution: dict[str, int] | None) -> dict[str, Any]:
    """Count, nulls, min/max/mean/stddev, approximate distinct counts, and the label distribution (rows per
    class of a classification label, counted by the caller together with the splits).

    One aggregate, written as SQL: built from pyspark.sql.functions, each of its (6 x columns) parts
    costs several calls into the JVM (0.9 s of Py4J round trips for 64 columns, measured with cProfile);
    one `selectExpr` is one call. Its outputs are named by position, so any column name works.
    """
    wanted: list[tuple[str, str, str]] = []  # (column, statistic, SQL aggregate)
    numeric = [label] + [s.name for s in specs if s.type in ("float", "int")]
    for name in numeric:
        c = _quoted(name)
        wanted += [
            (name, "nulls", f"count_if({c} IS NULL)"),
            (name, "min", f"min({c})"),
            (name, "max", f"max({c})"),
            (name, "mean", f"avg({c})"),
            (name, "stddev", f"stddev({c})"),
            (name, "distinct", f"approx_count_distinct({c}, {DISTINCT_RSD})"),
        ]
    for spec in specs:
        c = _quoted(spec.name)
        if spec.type == "string":
            wanted += [
                (spec.name, "nulls", f"count_if({c} IS NULL)"),
                (spec.name, "distinct", f"approx_count_distinct({c}, {DISTINCT_RSD})"),
            ]
        elif spec.type == "vector":
            # Statistics over all elements; per-element sums come from one pass over each array.
            wanted += [
                (spec.name, "nulls", f"count_if({c} IS NULL)"),
                (spec.name, "min", f"min(array_min({c}))"),
                (spec.name, "max", f"max(array_max({c}))"),
                (spec.name, "sum", f"sum(aggregate({c}, 0D, (acc, x) -> acc + x))"),
                (spec.name, "squares", f"sum(aggregate({c}, 0D, (acc, x) -> acc + x * x))"),
                (spec.name, "elements", f"sum(size({c}))"),
            ]
    row = df.selectExpr("count(1) AS _rows", *[f"{sql} AS _{i}" for i, (_, _, sql) in enumerate(wanted)]).first()
    columns: dict[str, dict[str, Any]] = {}
    for i, (name, stat, _) in enumerate(wanted):
        columns.setdefault(name, {})[stat] = row[f"_{i}"]
    for spec in specs:
        if spec.type == "vector":
            _vector_moments(columns[spec.name])
    result = {"rows": row["_rows"], "columns": columns}
    if label_distribution is not None:
        result["label_distribution"] = label_distribution
    return result


def _quoted(name: str) -> str:
    """A column name as a Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


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
