"""Validation: typed clean rows on one side, every failing row with its `_reject_reason` on the other.

Each row gets the first reason it fails, in column order: `malformed_row` / `undecodable_image`
(unreadable), then for the label and each declared feature `null:<col>`, `unparseable:<col>`,
`not_integer:<col>`, `nan_or_inf:<col>`, `wrong_size:<col>`, `out_of_range:<col>`,
`unknown_category:<col>`. One Spark aggregate counts rows per reason; nothing is collected.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from data_prep.ingest import INGEST_ERROR, INTERNAL_COLUMNS, RAW_RECORD, ROW_ID, Ingested, naming_unreadable_files
from sparkml_par.config import ColumnSpec, DataConfig
from sparkml_par.errors import SparkmlParError

REJECT_REASON = "_reject_reason"


@dataclass
class Validated:
    """Clean typed rows, quarantined raw rows, and the counts the manifest reports."""

    clean: Any
    rejected: Any
    rows_in: int
    rows_clean: int
    reasons: dict[str, int]
    num_classes: int
    features: list[ColumnSpec]


def require_column(name: str, columns: list[str], setting: str, fix: str | None = None) -> str:
    """The column if present; otherwise an error naming the closest existing column and the fix
    (by default: set the setting to one of the input's columns)."""
    if name in columns:
        return name
    close = difflib.get_close_matches(name, columns, n=1, cutoff=0.6)
    if not close:
        close = [c for c in columns if c.lower() == name.lower()]
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise SparkmlParError(f"{setting}: column {name!r} is not in the input; {hint}"
                          f"the input's columns are {', '.join(map(repr, columns))}; "
                          f"{fix or f'set {setting} to one of them'}")


def validate(ing: Ingested, cfg: DataConfig) -> Validated:
    """Types and checks every row, counts the reasons and applies the label-type checks."""
    from pyspark.sql import functions as F

    df = ing.df
    raw_columns = [c for c in df.columns if c not in INTERNAL_COLUMNS]
    require_column(cfg.label, raw_columns, "data.label")
    specs = ing.features or _infer_specs(df, cfg, raw_columns)
    for i, spec in enumerate(specs):
        require_column(spec.name, raw_columns, f"data.features[{i}].name")
    # The split key travels with the clean rows; a feature or label used as key is already there.
    carried = []
    if cfg.split.key:
        require_column(cfg.split.key, raw_columns, "data.split.key")
        if cfg.split.key not in [cfg.label] + [s.name for s in specs]:
            carried.append(cfg.split.key)
    _check_label_type(df, cfg)

    label_value, label_checks = _label_checks(df, cfg)
    checks = [(F.col(INGEST_ERROR).isNotNull(), F.col(INGEST_ERROR))] + label_checks
    typed = {}
    for spec in specs:
        value, spec_checks = _feature_checks(df, spec, cfg)
        typed[spec.name] = value
        checks.extend(spec_checks)
    reason = F.coalesce(*[F.when(cond, text) for cond, text in checks])
    annotated = df.select("*", reason.alias(REJECT_REASON), label_value.alias("_label_value"),
                          *[v.alias(f"_typed_{i}") for i, v in enumerate(typed.values())])

    counts = annotated.groupBy(REJECT_REASON).agg(F.count(F.lit(1)).alias("n"), F.max("_label_value").alias("top"))
    with naming_unreadable_files(cfg):  # the first job that reads every input file
        rows = counts.collect()  # one row per reason: an aggregate, not data
    rows_in = sum(r["n"] for r in rows)
    if rows_in == 0:
        raise SparkmlParError(f"data.path {cfg.path!r} has no rows ({cfg.source} input is empty); "
                              f"point data.path at a non-empty input")
    reasons = {r[REJECT_REASON]: r["n"] for r in rows if r[REJECT_REASON] is not None}
    clean_row = next((r for r in rows if r[REJECT_REASON] is None), None)
    _check_label_values(cfg, reasons, rows_in)

    num_classes = 0
    if cfg.task == "classification":
        seen = int(clean_row["top"]) + 1 if clean_row is not None and clean_row["top"] is not None else 0
        num_classes = cfg.num_classes or seen

    clean = annotated.where(F.col(REJECT_REASON).isNull()).select(
        ROW_ID, F.col("_label_value").alias(cfg.label),
        *[F.col(f"_typed_{i}").alias(name) for i, name in enumerate(typed)], *carried)
    rejected = annotated.where(F.col(REJECT_REASON).isNotNull()).select(
        ROW_ID, *[_as_text(df, c).alias(c) for c in raw_columns], RAW_RECORD, REJECT_REASON)
    return Validated(clean=clean, rejected=rejected, rows_in=rows_in, rows_clean=clean_row["n"] if clean_row else 0,
                     reasons=dict(sorted(reasons.items())), num_classes=num_classes, features=specs)


def check_reject_fraction(v: Validated, cfg: DataConfig, quarantine_url: str) -> None:
    """Refuses to go on when too much of the input was bad: training on the rest would mislead."""
    rejected = v.rows_in - v.rows_clean
    fraction = rejected / v.rows_in
    if fraction > cfg.max_reject_fraction or v.rows_clean == 0:
        top = ", ".join(f"{reason}: {n}" for reason, n in sorted(v.reasons.items(), key=lambda kv: -kv[1]))
        raise SparkmlParError(
            f"{rejected} of {v.rows_in} rows ({fraction:.1%}) failed validation, more than "
            f"data.max_reject_fraction={cfg.max_reject_fraction:g} allows ({top}); the rejected rows are in "
            f"{quarantine_url!r} with a _reject_reason column; fix the input or the declared columns, or raise "
            f"data.max_reject_fraction")


def _infer_specs(df, cfg: DataConfig, raw_columns: list[str]) -> list[ColumnSpec]:
    """`features: []` means every column but the label: numbers as float, text as categories."""
    from pyspark.sql.types import ArrayType, NumericType

    specs = []
    for f in df.schema.fields:
        if f.name not in raw_columns or f.name in (cfg.label, cfg.split.key):
            continue
        if isinstance(f.dataType, ArrayType):
            raise SparkmlParError(f"data.features: column {f.name!r} is an array; declare it with "
                                  f"type: vector and its size, e.g. {{name: {f.name}, type: vector, size: 64}}")
        numeric = cfg.source == "csv" or isinstance(f.dataType, NumericType)
        specs.append(ColumnSpec(name=f.name, type="float" if numeric else "string"))
    if not specs:
        raise SparkmlParError(f"data.features: the input has no columns besides the label {cfg.label!r}; "
                              f"add feature columns to the input")
    return specs


def _check_label_type(df, cfg: DataConfig) -> None:
    from pyspark.sql.types import NumericType, StringType

    dtype = df.schema[cfg.label].dataType
    if not isinstance(dtype, (NumericType, StringType)):
        raise SparkmlParError(
            f"data.label: column {cfg.label!r} has type {dtype.simpleString()}, but a {cfg.task} label must be "
            f"a number{' (integer class ids 0..K-1)' if cfg.task == 'classification' else ''}; "
            f"choose another data.label or convert the column")


def _check_label_values(cfg: DataConfig, reasons: dict[str, int], rows_in: int) -> None:
    """A label column that mostly fails the same type check is the wrong column, not a few bad rows."""
    readable = rows_in - sum(n for r, n in reasons.items() if r in ("malformed_row", "undecodable_image",
                                                                    f"null:{cfg.label}"))
    text = reasons.get(f"unparseable:{cfg.label}", 0)
    if readable and text > readable / 2:
        raise SparkmlParError(
            f"data.label: column {cfg.label!r} holds text, not numbers ({text} of {readable} values do not "
            f"parse); a {cfg.task} label must be numeric; choose another data.label or map the classes to 0..K-1")
    fractional = reasons.get(f"not_integer:{cfg.label}", 0)
    if readable and fractional > readable / 2:
        raise SparkmlParError(
            f"data.label: column {cfg.label!r} holds fractional numbers ({fractional} of {readable} values), but "
            f"data.task=classification needs integer class ids; set data.task=regression or choose another "
            f"data.label")


def _as_double(df, name: str):
    from pyspark.sql import functions as F
    from pyspark.sql.types import NumericType

    if isinstance(df.schema[name].dataType, NumericType):
        return F.col(f"`{name}`").cast("double")
    return F.expr(f"try_cast(`{name}` AS double)")


def _as_text(df, name: str):
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    column = F.col(f"`{name}`")
    if isinstance(df.schema[name].dataType, (ArrayType, MapType, StructType)):
        return F.to_json(column)
    return column.cast("string")


def _number_checks(raw, value, name: str, *, integer: bool, low, high, nullable: bool):
    from pyspark.sql import functions as F

    checks = []
    if not nullable:
        checks.append((raw.isNull(), F.lit(f"null:{name}")))
    checks.append((raw.isNotNull() & value.isNull(), F.lit(f"unparseable:{name}")))
    checks.append((F.isnan(value) | (F.abs(value) == float("inf")), F.lit(f"nan_or_inf:{name}")))
    if integer:
        checks.append((value != F.floor(value), F.lit(f"not_integer:{name}")))
    if low is not None:
        checks.append((value < F.lit(float(low)), F.lit(f"out_of_range:{name}")))
    if high is not None:
        checks.append((value > F.lit(float(high)), F.lit(f"out_of_range:{name}")))
    return checks


def _label_checks(df, cfg: DataConfig):
    from pyspark.sql import functions as F

    raw = F.col(f"`{cfg.label}`")
    value = _as_double(df, cfg.label)
    if cfg.task == "regression":
        checks = _number_checks(raw, value, cfg.label, integer=False, low=None, high=None, nullable=False)
        return value.cast("float"), checks
    high = cfg.num_classes - 1 if cfg.num_classes else None
    checks = _number_checks(raw, value, cfg.label, integer=True, low=0, high=high, nullable=False)
    return value.cast("long"), checks


def _feature_checks(df, spec: ColumnSpec, cfg: DataConfig):
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, NumericType, StringType

    raw = F.col(f"`{spec.name}`")
    dtype = df.schema[spec.name].dataType
    if spec.type == "vector":
        if not (isinstance(dtype, ArrayType) and isinstance(dtype.elementType, NumericType)):
            raise SparkmlParError(f"data.features: column {spec.name!r} is declared type: vector but holds "
                                  f"{dtype.simpleString()}; declare its real type or convert it to an array of numbers")
        return _vector_checks(raw, spec)
    if spec.type == "string":
        value = raw.cast("string")
        checks = [(raw.isNull(), F.lit(f"null:{spec.name}"))]
        if spec.categories is not None:
            allowed = F.array(*[F.lit(c) for c in spec.categories])
            checks.append((~F.array_contains(allowed, value), F.lit(f"unknown_category:{spec.name}")))
        return value, checks
    if not isinstance(dtype, (NumericType, StringType)):
        raise SparkmlParError(f"data.features: column {spec.name!r} is declared type: {spec.type} but holds "
                              f"{dtype.simpleString()}; declare its real type or convert it")
    value = _as_double(df, spec.name)
    nullable = cfg.featurize.impute != "none"
    checks = _number_checks(raw, value, spec.name, integer=spec.type == "int", low=spec.min, high=spec.max,
                            nullable=nullable)
    return value, checks


def _vector_checks(raw, spec: ColumnSpec):
    """Whole-array checks with array_min/array_max: NaN sorts above every number, so one pass finds it."""
    from pyspark.sql import functions as F

    value = raw.cast("array<float>")
    top, bottom = F.array_max(value), F.array_min(value)
    checks = [(raw.isNull(), F.lit(f"null:{spec.name}"))]
    if spec.size is not None:
        checks.append((F.size(value) != spec.size, F.lit(f"wrong_size:{spec.name}")))
    checks.append((F.size(F.array_compact(value)) != F.size(value), F.lit(f"null:{spec.name}")))
    checks.append((F.isnan(top) | (top == float("inf")) | (bottom == float("-inf")), F.lit(f"nan_or_inf:{spec.name}")))
    if spec.min is not None:
        checks.append((bottom < F.lit(float(spec.min)), F.lit(f"out_of_range:{spec.name}")))
    if spec.max is not None:
        checks.append((top > F.lit(float(spec.max)), F.lit(f"out_of_range:{spec.name}")))
    return value, checks
