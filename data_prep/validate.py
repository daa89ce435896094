"""Validation: typed clean rows on one side, every failing row with its `_reject_reason` on the other.

Each row gets the first reason it fails, in column order: `malformed_row` / `undecodable_image`
(unreadable), then for the label and each declared feature `null:<col>`, `unparseable:<col>`,
`not_integer:<col>`, `nan_or_inf:<col>`, `wrong_size:<col>`, `out_of_range:<col>`,
`unknown_category:<col>`. One Spark aggregate counts rows per reason; nothing is collected.
"""

from __future__ import annotations

import difflib
import functools
import logging
import string
from dataclasses import dataclass, field
from typing import Any, Callable

from data_prep.ingest import UNDECODABLE, Ingested, naming_unreadable_files
from sparkml_par.config import ColumnSpec, DataConfig
from sparkml_par.contract import (
    INGEST_ERROR,
    INTERNAL_COLUMNS,
    RAW_RECORD,
    REJECT_REASON,
    ROW_ID,
    as_number,
    column,
    quoted,
)
from sparkml_par.errors import SparkmlParError

log = logging.getLogger(__name__)

# The column of a rejected row's raw values in prepare's persisted rows (null for a clean row).
_RAW_VALUES = "_sparkml_par_raw"
# More distinct text labels than this means the column is not a class label (an id, free text).
MAX_CLASSES = 1000
# What a missing category becomes when imputation is on: a category of its own, in prepare and in scoring.
MISSING_CATEGORY = "<missing>"
# The words a bool column may hold (any case, around spaces); JSON and Parquet booleans are taken as they are.
TRUE_WORDS = ("true", "t", "yes", "y", "1", "1.0")
FALSE_WORDS = ("false", "f", "no", "n", "0", "0.0")


@dataclass
class Validated:
    """Clean typed rows, quarantined raw rows, and the counts the manifest reports."""

    clean: Any
    rows_in: int
    rows_clean: int
    reasons: dict[str, int]
    num_classes: int
    features: list[ColumnSpec]
    # Names of the classes 0..K-1 when the labels are text or image folders; None for numeric labels.
    classes: list[str] | None = None
    # Every row typed and annotated, persisted by prepare's validate (clean and rejected read it).
    annotated: Any = None
    # Inferred feature columns left out (unique per row), with why.
    left_out: dict[str, str] = field(default_factory=dict)
    # The rejected rows' Spark schema, and what builds their DataFrame (`rejected`): two projections as wide
    # as the input, planned only where rows were rejected.
    rejected_schema: Any = None
    rejected_rows: Callable[[], Any] | None = field(default=None, repr=False)

    @functools.cached_property
    def rejected(self) -> Any:
        """Rejected rows as the input had them (as text), with the reason."""
        return self.rejected_rows()

    def release(self) -> None:
        """Frees the persisted rows once their last job ran."""
        if self.annotated is not None and self.annotated.is_cached:
            self.annotated.unpersist()


def require_column(name: str, columns: list[str], setting: str, fix: str | None = None) -> str:
    """The column if present; otherwise an error naming the closest existing column and the fix
    (by default: set the setting to one of the input's columns)."""
    if name in columns:
        return name
    close = difflib.get_close_matches(name, columns, n=1, cutoff=0.6)
    if not close:
        close = [c for c in columns if c.lower() == name.lower()]
    hint = f"did you mean {close[0]!r}? " if close else ""
    separators = [sep for sep in (";", "\t", "|") if len(columns) == 1 and sep in columns[0]]
    if separators:  # a CSV read with the wrong separator has one column named after the whole header
        hint = (
            f"the input has one column, whose name holds {separators[0]!r}: its fields look separated by "
            f"{separators[0]!r}, so set data.csv_sep={separators[0]!r}; "
        )
    raise SparkmlParError(
        f"{setting}: column {name!r} is not in the input; {hint}"
        f"the input's columns are {', '.join(map(repr, columns))}; "
        f"{fix or f'set {setting} to one of them'}"
    )


def validate(ing: Ingested, cfg: DataConfig) -> Validated:
    """Types and checks every row, counts the reasons and applies the label-type checks.

    A classification label that holds text (`setosa`, `yes`) is indexed: its distinct values, sorted,
    become the classes 0..K-1, listed in the manifest so scoring reports them. Image labels are already
    the index of their folder's name.
    """
    from pyspark.sql import functions as F

    df = ing.df
    raw_columns = [c for c in df.columns if c not in INTERNAL_COLUMNS]
    require_column(cfg.label, raw_columns, "data.label")
    specs, left_out = (ing.features, {}) if ing.features else _infer_specs(df, cfg, raw_columns)
    for i, spec in enumerate(specs):
        require_column(spec.name, raw_columns, f"data.features[{i}].name")
    # The split key travels with the clean rows; a feature or label used as key is already there.
    carried = []
    if cfg.split.key:
        require_column(cfg.split.key, raw_columns, "data.split.key")
        if cfg.split.key not in [cfg.label] + [s.name for s in specs]:
            carried.append(cfg.split.key)
    _check_label_type(df, cfg)

    classes = ing.classes
    df = _with_numbers_parsed(df, specs, cfg.label)
    annotated, counts = _annotate(df, cfg, specs, _label_checks(df, cfg), persist=True, carried=carried)
    try:
        if cfg.task == "classification" and classes is None and _holds_text(cfg, counts):
            classes = _text_classes(df, cfg)
            annotated.unpersist()
            annotated, counts = _annotate(
                df, cfg, specs, _text_label_checks(df, cfg, classes), persist=True, carried=carried
            )
        rows_in, reasons, clean_row = _tally(counts)
        _check_decoded(cfg, reasons, rows_in)
        _check_label_values(cfg, reasons, rows_in)
    except BaseException:
        annotated.unpersist()
        raise

    num_classes = 0
    if cfg.task == "classification":
        seen = int(clean_row["top"]) + 1 if clean_row is not None and clean_row["top"] is not None else 0
        num_classes = cfg.num_classes or (len(classes) if classes else seen)

    clean_columns = [
        ROW_ID,
        F.col("_label_value").alias(cfg.label),
        *[F.col(f"_typed_{i}").alias(spec.name) for i, spec in enumerate(specs)],
        *carried,
    ]
    return _validated(annotated, df, raw_columns, clean_columns, counts, specs, num_classes, classes, left_out)


def validate_for_scoring(ing: Ingested, cfg: DataConfig, specs: list[ColumnSpec]) -> Validated:
    """The feature checks of prepare, from the dataset's own rules, applied to rows to be scored.

    What prepare imputes is left to the feature pipeline to impute; what prepare quarantines is rejected
    here with the same reason. The label is not checked (rows without one are scored); every column that
    is not a feature (an id, the label) is carried as it is.
    """
    from pyspark.sql import functions as F

    df = ing.df
    raw_columns = [c for c in df.columns if c not in INTERNAL_COLUMNS]
    names = [s.name for s in specs]
    for name in names:
        require_column(
            name,
            raw_columns,
            "scoring input",
            fix=f"the model's features are built from the raw columns {names!r}: give the input all of them",
        )
    df = _with_numbers_parsed(df, specs)
    annotated, counts = _annotate(df, cfg, specs, None)
    others = [column(c) for c in raw_columns if c not in names]
    clean_columns = [ROW_ID, *[F.col(f"_typed_{i}").alias(name) for i, name in enumerate(names)], *others]
    return _validated(annotated, df, raw_columns, clean_columns, counts, specs)


def _validated(
    annotated, df, raw_columns, clean_columns, counts, specs, num_classes: int = 0, classes=None, left_out=None
) -> Validated:
    """The clean rows (clean_columns of the rows without a reason), the quarantined raw rows and their counts."""
    from pyspark.sql import functions as F

    rows_in, reasons, clean_row = _tally(counts)
    return Validated(
        clean=annotated.where(F.col(REJECT_REASON).isNull()).select(*clean_columns),
        rows_in=rows_in,
        rows_clean=clean_row["n"] if clean_row else 0,
        reasons=dict(sorted(reasons.items())),
        num_classes=num_classes,
        features=specs,
        classes=classes,
        annotated=annotated,
        left_out=left_out or {},
        rejected_schema=_rejected_schema(annotated, raw_columns),
        rejected_rows=functools.partial(_rejected, annotated, df, raw_columns),
    )


def _annotate(df, cfg: DataConfig, specs: list[ColumnSpec], label, persist: bool = False, carried=()):
    """Every row with its first failing reason, its typed label and features; and the count per reason
    (with the largest clean label), from one Spark aggregate: one row per reason, not data.

    persist: the aggregate computes the annotated rows into Spark's cache, so that prepare's later jobs
    (quarantine, duplicates, profile, featurize, write) read them typed instead of reading and checking
    the input again; the raw columns are cached for rejected rows only (packed in one struct column, which
    _rejected unpacks), and for every row those in `carried` (the clean rows' raw columns). Spark's columnar
    cache keeps a null as its row's position: a raw column each, null in nearly every row, cost more to
    build and hold than the typed rows.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    label_value, label_checks = label if label is not None else (F.lit(None).cast("long"), [])
    checks = [(F.col(INGEST_ERROR).isNotNull(), F.col(INGEST_ERROR))] + label_checks
    typed = []
    for spec in specs:
        value, spec_checks = _feature_checks(df, spec, cfg)
        typed.append(value)
        checks.extend(spec_checks)
    reason = F.coalesce(*[F.when(cond, text) for cond, text in checks])
    columns = [c for c in df.columns if not c.startswith(_PARSED)]
    annotated = df.select(
        *[column(c) for c in columns],
        reason.alias(REJECT_REASON),
        label_value.alias("_label_value"),
        *[v.alias(f"_typed_{i}") for i, v in enumerate(typed)],
    )
    if persist:
        # Clean rows are read typed from here on: their raw values (but those carried) are not cached.
        kept = [c for c in columns if c in (ROW_ID, *carried)]
        raw = F.struct(*[column(c) for c in columns if c not in kept])
        annotated = annotated.select(
            *[column(c) for c in kept],
            F.when(F.col(REJECT_REASON).isNotNull(), raw).alias(_RAW_VALUES),
            *annotated.columns[len(columns) :],
        ).persist(StorageLevel.MEMORY_AND_DISK)
    counts = annotated.groupBy(REJECT_REASON).agg(F.count(F.lit(1)).alias("n"), F.max("_label_value").alias("top"))
    try:
        with naming_unreadable_files(cfg):  # the first job that reads every input file
            rows = counts.collect()
    except BaseException:
        annotated.unpersist()
        raise
    if not rows:
        annotated.unpersist()
        raise SparkmlParError(
            f"data.path {cfg.path!r} has no rows ({cfg.source} input is empty); point data.path at a non-empty input"
        )
    return annotated, rows


def _tally(counts) -> tuple[int, dict[str, int], Any]:
    """(rows in, rows per reject reason, the clean rows' count row or None) from `_annotate`'s aggregate."""
    reasons = {r[REJECT_REASON]: r["n"] for r in counts if r[REJECT_REASON] is not None}
    return sum(r["n"] for r in counts), reasons, next((r for r in counts if r[REJECT_REASON] is None), None)


def _rejected_schema(annotated, raw_columns: list[str]):
    """The schema of `_rejected`'s rows, without planning them: the row id as annotated, the rest text."""
    from pyspark.sql.types import StringType, StructField, StructType

    texts = [*raw_columns, RAW_RECORD, REJECT_REASON]
    return StructType([annotated.schema[ROW_ID], *[StructField(name, StringType()) for name in texts]])


def _rejected(annotated, df, raw_columns: list[str]):
    """Rejected rows as the input had them (as text), with the reason."""
    from pyspark.sql import functions as F

    rejected = annotated.where(F.col(REJECT_REASON).isNotNull())
    if _RAW_VALUES in annotated.columns:  # persisted by _annotate: the raw values packed
        rejected = rejected.select("*", f"{_RAW_VALUES}.*")
    return rejected.select(ROW_ID, *[_as_text(df, c).alias(c) for c in raw_columns], RAW_RECORD, REJECT_REASON)


def _holds_text(cfg: DataConfig, counts) -> bool:
    """Most readable labels do not parse as numbers: the label names classes."""
    rows_in, reasons, _ = _tally(counts)
    readable = _readable_labels(cfg, reasons, rows_in)
    return readable > 0 and reasons.get(f"unparseable:{cfg.label}", 0) > readable / 2


def _readable_labels(cfg: DataConfig, reasons: dict[str, int], rows_in: int) -> int:
    """Rows whose label could be read at all: not unreadable rows, not missing labels."""
    return rows_in - sum(
        n for r, n in reasons.items() if r in ("malformed_row", "undecodable_image", f"null:{cfg.label}")
    )


def _text_classes(df, cfg: DataConfig) -> list[str]:
    """The label's distinct values, sorted: class i is classes[i]. An aggregate of at most MAX_CLASSES + 1 rows."""

    label = column(cfg.label).cast("string")
    with naming_unreadable_files(cfg):
        values = [r[0] for r in df.where(label.isNotNull()).select(label).distinct().limit(MAX_CLASSES + 1).collect()]
    if len(values) > MAX_CLASSES:
        raise SparkmlParError(
            f"data.label: column {cfg.label!r} holds text with more than {MAX_CLASSES} distinct values, too many "
            f"for the classes of a classification label; choose another data.label"
        )
    if cfg.num_classes and len(values) > cfg.num_classes:
        raise SparkmlParError(
            f"data.label: column {cfg.label!r} holds {len(values)} distinct classes "
            f"({', '.join(map(repr, sorted(values)[:20]))}) "
            f"but data.num_classes={cfg.num_classes}; set data.num_classes={len(values)} or 0 (read from the data)"
        )
    return sorted(values)


def _text_label_checks(df, cfg: DataConfig, classes: list[str]):
    """The class index of a text label (every non-null value is one of `classes`)."""
    from pyspark.sql import functions as F

    raw = column(cfg.label)
    # pyspark 3.5's F.array_position takes a literal, not a column, as the value.
    index = F.call_function("array_position", F.array(*[F.lit(c) for c in classes]), raw.cast("string")) - 1
    return index.cast("long"), [(raw.isNull(), F.lit(f"null:{cfg.label}"))]


def _check_decoded(cfg: DataConfig, reasons: dict[str, int], rows_in: int) -> None:
    """Text read in the wrong encoding is a setting to fix, not rows to quarantine."""
    undecodable = reasons.get(UNDECODABLE, 0)
    if undecodable:
        raise SparkmlParError(
            f"data.path {cfg.path!r}: {undecodable} of {rows_in} rows hold bytes that are not {cfg.encoding} text; "
            f"set data.encoding to the files' encoding (iso-8859-1 for a Latin-1 or Windows export), or write "
            f"them again as {cfg.encoding}"
        )


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
            f"data.max_reject_fraction"
        )


# Feature types are inferred from the input's first rows (every row is still checked against them): what
# most values of a column parse as shows in a prefix, and the checks of every kind cost more than a parse.
INFER_ROWS = 20_000
# An inferred column whose distinct values are at least this fraction of its values, over at least
# MIN_ROWS_UNIQUE rows, is unique per row (an id, free text): left out of inferred features.
UNIQUE_FRACTION = 0.9
MIN_ROWS_UNIQUE = 50
# Words a text column of bools holds (digits 0 / 1 read as numbers first).
_BOOL_WORDS = tuple(w for w in TRUE_WORDS + FALSE_WORDS if not w[0].isdigit())


def _infer_specs(df, cfg: DataConfig, raw_columns: list[str]) -> tuple[list[ColumnSpec], dict[str, str]]:
    """`features: []` means every column but the label and the split key; and the columns left out, with why.

    A column's type follows its Spark type (numbers, bool, timestamp, date), or for text (every CSV column, a
    JSON string) what most of its values parse as: numbers, bool words (true/false, yes/no), ISO 8601
    timestamps or dates; else it is a category column. A text or whole-number column with a distinct value in
    (nearly) every row is an id or free text, not a feature: it is left out and said so. One aggregate over
    the first INFER_ROWS readable rows counts the text and whole-number columns; no job runs when the input
    has none (Parquet of floats).
    """
    from pyspark.sql.types import ArrayType, BooleanType, DateType, IntegralType, NumericType, StringType

    fields = [f for f in df.schema.fields if f.name in raw_columns and f.name not in (cfg.label, cfg.split.key)]
    if not fields:
        raise SparkmlParError(
            f"data.features: the input has no columns besides the label {cfg.label!r}; add feature columns to the input"
        )
    for f in fields:
        if isinstance(f.dataType, ArrayType):
            raise SparkmlParError(
                f"data.features: column {f.name!r} is an array; declare it with "
                f"type: vector and its size, e.g. {{name: {f.name}, type: vector, size: 64}}"
            )
    counted = [f for f in fields if isinstance(f.dataType, (StringType, IntegralType))]
    found = {}
    if counted:
        with naming_unreadable_files(cfg):
            found = {counted[i].name: row for i, row in _value_counts(df, counted).items()}
    none = {"values": 0, "distinct": 0, "numbers": 0, "wholes": 0, "bools": 0, "moments": 0, "dates": 0}
    specs, left_out = [], {}
    for f in fields:
        row = found.get(f.name, none)
        values, distinct = row["values"], row["distinct"]
        unique = values >= MIN_ROWS_UNIQUE and distinct >= UNIQUE_FRACTION * values
        dtype = f.dataType
        if isinstance(dtype, BooleanType):
            kind = "bool"
        elif isinstance(dtype, DateType):
            kind = "date"
        elif dtype.typeName() in ("timestamp", "timestamp_ntz"):
            kind = "timestamp"
        elif isinstance(dtype, NumericType):
            kind = "id" if unique and isinstance(dtype, IntegralType) else "float"
        elif isinstance(dtype, StringType) and values:
            kind = _text_kind(row, values, unique)
        else:
            kind = "string"
        if kind == "id":
            left_out[f.name] = f"about {min(distinct, values)} distinct values in {values} rows (an id or free text)"
            continue
        specs.append(ColumnSpec(name=f.name, type=kind))
    for name, why in left_out.items():
        log.warning(
            "data.features %r is left out of the inferred features: %s; declare it in data.features to keep it",
            name,
            why,
        )
    if not specs:
        raise SparkmlParError(
            f"data.features: every column besides the label is unique per row ({', '.join(map(repr, left_out))}), "
            f"so none is a feature; declare the feature columns in data.features"
        )
    return specs, left_out


def _value_counts(df, fields) -> dict[int, Any]:
    """Per field (by position), over the first INFER_ROWS readable rows: its values, their approximate
    distinct count, and how many read as numbers, whole numbers, bool words, timestamps and dates. The
    fields are unpivoted into one (column, text) table and counted per column: the plan holds seven
    aggregates whatever the width, where one wide row of them costs more to plan and compile than to run."""
    from pyspark.sql import functions as F

    parts = [f"CAST({quoted(f.name)} AS STRING) AS `{i}`" for i, f in enumerate(fields)]
    rows = df.where(F.col(INGEST_ERROR).isNull()).limit(INFER_ROWS).selectExpr(*parts)
    long = rows.unpivot([], [str(i) for i in range(len(fields))], "column", "value")
    value, number, moment = F.col("value"), as_number("value"), F.expr("try_to_timestamp(value)")
    word = _bool_word(value)
    counted = long.groupBy("column").agg(
        F.count(value).alias("values"),
        F.approx_count_distinct(value).alias("distinct"),
        F.count(number).alias("numbers"),
        F.count(F.when(number == F.floor(number), 1)).alias("wholes"),
        F.count(F.when(word.isin(*_BOOL_WORDS), 1)).alias("bools"),
        F.count(moment).alias("moments"),
        F.count(F.when(moment.isNotNull() & (F.length(F.trim(value)) <= 10), 1)).alias("dates"),
    )
    return {int(r["column"]): r for r in counted.collect()}


def _text_kind(row, values: int, unique: bool) -> str:
    """What a text column holds, by what most of its values parse as; "id" when it is unique per row."""
    numbers, wholes = row["numbers"], row["wholes"]
    if numbers > values / 2:
        return "id" if unique and wholes == numbers else "float"
    if row["bools"] > values / 2:
        return "bool"
    moments = row["moments"]
    if moments > values / 2:
        return "date" if row["dates"] == moments else "timestamp"
    return "id" if unique else "string"


def _check_label_type(df, cfg: DataConfig) -> None:
    from pyspark.sql.types import NumericType, StringType

    dtype = df.schema[cfg.label].dataType
    if not isinstance(dtype, (NumericType, StringType)):
        raise SparkmlParError(
            f"data.label: column {cfg.label!r} has type {dtype.simpleString()}, but a {cfg.task} label must be "
            f"a number{' (integer class ids 0..K-1)' if cfg.task == 'classification' else ''}; "
            f"choose another data.label or convert the column"
        )


def _check_label_values(cfg: DataConfig, reasons: dict[str, int], rows_in: int) -> None:
    """A label column that mostly fails the same type check is the wrong column, not a few bad rows."""
    readable = _readable_labels(cfg, reasons, rows_in)
    text = reasons.get(f"unparseable:{cfg.label}", 0)
    if readable and text > readable / 2:  # a classification label of text was indexed before this
        raise SparkmlParError(
            f"data.label: column {cfg.label!r} holds text, not numbers ({text} of {readable} values do not "
            f"parse); a {cfg.task} label must be numeric; choose another data.label, or set "
            f"data.task=classification to use its values as classes"
        )
    fractional = reasons.get(f"not_integer:{cfg.label}", 0)
    if readable and fractional > readable / 2:
        raise SparkmlParError(
            f"data.label: column {cfg.label!r} holds fractional numbers ({fractional} of {readable} values), but "
            f"data.task=classification needs integer class ids; set data.task=regression or choose another "
            f"data.label"
        )


# A text column the checks read as a number is parsed once per row, into a column of its own below them:
# Spark evaluates an expression again in each CASE WHEN that holds it (a number column has up to five
# checks), and does not merge a projection into one that reads its costly expressions more than once.
_PARSED = "_sparkml_par_number:"


def _with_numbers_parsed(df, specs: list[ColumnSpec], label: str | None = None):
    """df with each text column the checks read as a number (the label, the float and int features) also as
    a double, null where it does not parse: what _as_double reads."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    names = ([label] if label else []) + [s.name for s in specs if s.type in ("float", "int")]
    texts = [n for n in dict.fromkeys(names) if isinstance(df.schema[n].dataType, StringType)]
    return df.withColumns({f"{_PARSED}{n}": F.expr(f"try_cast({quoted(n)} AS double)") for n in texts})


def _as_double(df, name: str):
    """A number column as a double: a numeric type cast, a text column as parsed by _with_numbers_parsed."""
    from pyspark.sql.types import NumericType

    if isinstance(df.schema[name].dataType, NumericType):
        return column(name).cast("double")
    return column(f"{_PARSED}{name}")


def _as_text(df, name: str):
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    value = column(name)
    if isinstance(df.schema[name].dataType, (ArrayType, MapType, StructType)):
        return F.to_json(value)
    return value.cast("string")


def _number_checks(raw, value, name: str, dtype, *, integer: bool, low, high, nullable: bool):
    """The checks of a number read from a column of Spark type dtype, leaving out those its type cannot
    fail: a numeric column always parses, and an integral one is never NaN, infinite or fractional (fewer
    expressions in a plan as wide as the input)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegralType, NumericType

    numeric, integral = isinstance(dtype, NumericType), isinstance(dtype, IntegralType)
    checks = []
    if not nullable:
        checks.append((raw.isNull(), F.lit(f"null:{name}")))
    if not numeric:
        checks.append((raw.isNotNull() & value.isNull(), F.lit(f"unparseable:{name}")))
    if not integral:
        checks.append((F.isnan(value) | (F.abs(value) == float("inf")), F.lit(f"nan_or_inf:{name}")))
    if integer and not integral:
        checks.append((value != F.floor(value), F.lit(f"not_integer:{name}")))
    if low is not None:
        checks.append((value < F.lit(float(low)), F.lit(f"out_of_range:{name}")))
    if high is not None:
        checks.append((value > F.lit(float(high)), F.lit(f"out_of_range:{name}")))
    return checks


def _label_checks(df, cfg: DataConfig):

    raw, dtype = column(cfg.label), df.schema[cfg.label].dataType
    value = _as_double(df, cfg.label)
    if cfg.task == "regression":
        checks = _number_checks(raw, value, cfg.label, dtype, integer=False, low=None, high=None, nullable=False)
        return value.cast("float"), checks
    high = cfg.num_classes - 1 if cfg.num_classes else None
    checks = _number_checks(raw, value, cfg.label, dtype, integer=True, low=0, high=high, nullable=False)
    return value.cast("long"), checks


def _feature_checks(df, spec: ColumnSpec, cfg: DataConfig):
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, NumericType, StringType

    raw = column(spec.name)
    dtype = df.schema[spec.name].dataType
    if spec.type == "vector":
        if not (isinstance(dtype, ArrayType) and isinstance(dtype.elementType, NumericType)):
            raise SparkmlParError(
                f"data.features: column {spec.name!r} is declared type: vector but holds "
                f"{dtype.simpleString()}; declare its real type or convert it to an array of numbers"
            )
        return _vector_checks(raw, spec)
    if spec.type == "string":
        impute = cfg.featurize.impute != "none"
        # An empty text is missing in every format, as CSV and JSON read it by default (and no category can be
        # named by it in Spark ML).
        text = F.when(raw.cast("string") != "", raw.cast("string"))
        value = F.coalesce(text, F.lit(MISSING_CATEGORY)) if impute else text
        checks = [] if impute else [(text.isNull(), F.lit(f"null:{spec.name}"))]
        if spec.categories is not None:
            allowed = F.array(*[F.lit(c) for c in spec.categories])
            checks.append((text.isNotNull() & ~F.array_contains(allowed, text), F.lit(f"unknown_category:{spec.name}")))
        return value, checks
    nullable = cfg.featurize.impute != "none"
    if spec.type in ("bool", "timestamp", "date"):
        value = _as_bool(df, spec) if spec.type == "bool" else _as_timestamp(df, spec)
        checks = [] if nullable else [(raw.isNull(), F.lit(f"null:{spec.name}"))]
        return value, checks + [(raw.isNotNull() & value.isNull(), F.lit(f"unparseable:{spec.name}"))]
    if not isinstance(dtype, (NumericType, StringType)):
        raise SparkmlParError(
            f"data.features: column {spec.name!r} is declared type: {spec.type} but holds "
            f"{dtype.simpleString()}; declare its real type or convert it"
        )
    value = _as_double(df, spec.name)
    checks = _number_checks(
        raw, value, spec.name, dtype, integer=spec.type == "int", low=spec.min, high=spec.max, nullable=nullable
    )
    return value, checks


def _bool_word(text):
    """A text trimmed and with A-Z in lower case, to compare with the bool words (all ASCII). Not Spark's
    lower(): on Spark 4 it first builds ICU's case tables, a fixed cost paid again in each fresh driver JVM."""
    from pyspark.sql import functions as F

    return F.translate(F.trim(text), string.ascii_uppercase, string.ascii_lowercase)


def _as_bool(df, spec: ColumnSpec):
    """A bool column as 1.0 / 0.0, null when it holds anything else (then `unparseable:<col>`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    raw = column(spec.name)
    if isinstance(df.schema[spec.name].dataType, BooleanType):
        return raw.cast("double")
    word = _bool_word(raw.cast("string"))
    return F.when(word.isin(*TRUE_WORDS), F.lit(1.0)).when(word.isin(*FALSE_WORDS), F.lit(0.0))


def _as_timestamp(df, spec: ColumnSpec):
    """A timestamp or date column as a timestamp: a Spark timestamp or date as it is, text parsed with
    spec.format or as ISO 8601 (`2013-01-01T10:00:00Z`, `2013-01-01`), null when it does not parse."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, StringType, TimestampType

    raw = column(spec.name)
    dtype = df.schema[spec.name].dataType
    if isinstance(dtype, (TimestampType, DateType)) or dtype.typeName() == "timestamp_ntz":
        return raw.cast("timestamp")
    if not isinstance(dtype, StringType):
        raise SparkmlParError(
            f"data.features: column {spec.name!r} is declared type: {spec.type} but holds "
            f"{dtype.simpleString()}; declare its real type or convert it"
        )
    name = quoted(spec.name)
    if spec.format is None:
        return F.expr(f"try_to_timestamp({name})")
    pattern = spec.format.replace("\\", "\\\\").replace("'", "\\'")
    return F.expr(f"try_to_timestamp({name}, '{pattern}')")


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
