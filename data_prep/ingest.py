"""Reading raw rows: files Spark reads (CSV, JSON lines, Parquet, image folders) and two built-in sources.

Every source yields a DataFrame of raw columns plus `_row_id` (a stable int64 id), `_ingest_error`
(why a row could not even be read, or null) and `_raw_record` (the unreadable text, or null), so that
validation can quarantine unreadable rows next to invalid ones. Nothing is collected to the driver,
except the 1,797 rows of scikit-learn's digits, which ship with the library.
"""

from __future__ import annotations

import contextlib
import glob
import io
import logging
import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import numpy as np

from data_prep.manifest import hash_parts
from sparkml_par.config import ColumnSpec, DataConfig
from sparkml_par.contract import (
    FEATURES,
    INGEST_ERROR,
    INTERNAL_COLUMNS,
    RAW_RECORD,
    REJECT_REASON,
    ROW_ID,
    SPLIT,
    as_number,
    column,
)
from sparkml_par.errors import SparkmlParError
from sparkml_par.io.hadoop import HadoopFs, qualify_url

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = ("png", "jpg", "jpeg")
# The column Spark's CSV and JSON readers put a line they cannot parse in.
_CORRUPT_RECORD = "_corrupt_record"
# The reason of a row whose text did not decode in data.encoding, and the character the reader put there.
UNDECODABLE = "undecodable_text"
UNDECODABLE_CHAR = "\ufffd"
# Names of the columns the pipeline adds to the input's own.
_OWN_COLUMNS = (*INTERNAL_COLUMNS, REJECT_REASON, SPLIT, _CORRUPT_RECORD)
# Rows of one synthetic block come from one generator seeded by (seed, block index), so the rows do
# not depend on how the blocks are spread over partitions.
_SYNTHETIC_BLOCK_ROWS = 4096
# scikit-learn's digits: 1,797 rows of 64 pixels and a label.
_DIGITS_VALUES = 1_797 * 65


@dataclass
class Ingested:
    """Raw rows and what is known about them before validation."""

    df: Any
    input_fingerprint: str
    features: list[ColumnSpec]
    feature_shape: list[int] | None = None
    classes: list[str] | None = None
    # Row ids hashed from the row's content: identical rows share one until split.make_row_ids_unique.
    content_row_ids: bool = False


def input_fingerprint(spark, cfg: DataConfig) -> str:
    """The identity of the input, known without reading it: a generator's parameters, or the paths, sizes
    and modification times of the input files. An unchanged prepare stops here, before any reader starts."""
    if cfg.source == "digits":
        from sklearn.datasets import load_digits

        return hash_parts({"source": "digits", "rows": len(load_digits().target)})
    if cfg.source == "synthetic":
        s = cfg.synthetic
        # Partitioning does not change the rows, so it is not part of the input's identity.
        return hash_parts(
            {"source": "synthetic", "rows": s.rows, "features": s.features, "classes": s.classes, "seed": s.seed}
        )
    return hash_parts(_input_files(spark, cfg, qualify_url(cfg.path)))


def input_bytes(cfg: DataConfig, limit: int) -> int | None:
    """The input's size, known before a session starts, counted until it passes `limit`: the bytes of its files
    on this machine, or a built-in source's values as doubles; None where its files are elsewhere (their sizes
    take the JVM's filesystem) or none matches (prepare says so once the session is up)."""
    if cfg.source == "digits":
        return _DIGITS_VALUES * 8
    if cfg.source == "synthetic":
        return cfg.synthetic.rows * (cfg.synthetic.features + 1) * 8
    url = urlparse(qualify_url(cfg.path))
    if url.scheme != "file" or "{" in url.path:  # Python's glob has no {a,b} alternatives
        return None
    total, matched = 0, False
    try:
        for match in glob.iglob(url.path):
            matched = True
            files = [match]  # a file the path names is read whatever its name
            if os.path.isdir(match):  # a folder's files, but those Spark's readers skip as hidden
                walked = os.walk(match)
                files = (
                    os.path.join(folder, name) for folder, _, names in walked for name in names if name[0] not in "._"
                )
            for file in files:
                total += os.path.getsize(file)
                if total > limit:
                    return total
    except OSError:  # a file gone or unreadable while counted: the reader will say
        return None
    return total if matched else None


def ingest(spark, cfg: DataConfig, classes: list[str] | None = None) -> Ingested:
    """Dispatches on data.source. `classes` are a trained model's image classes (scoring new images): a
    folder's label is its index there, not among the folders found."""
    fingerprint = input_fingerprint(spark, cfg)
    if cfg.source == "digits":
        return _digits(spark, cfg, fingerprint)
    if cfg.source == "synthetic":
        return _synthetic(spark, cfg, fingerprint)
    url = qualify_url(cfg.path)
    if cfg.source == "images":
        return _images(spark, cfg, url, fingerprint, classes)
    readers = {"csv": _csv, "json": _json, "parquet": _parquet}
    df = _with_corrupt_record(readers[cfg.source](spark, cfg, url), _CORRUPT_RECORD, "malformed_row")
    raw_columns = [c for c in df.columns if c not in INTERNAL_COLUMNS]
    if cfg.source in ("csv", "json"):
        df = _with_null_tokens(df, raw_columns, cfg.null_values)
        df = _with_undecodable_rows(df, raw_columns)
    df = _with_content_row_id(df, raw_columns)
    return Ingested(df=df, input_fingerprint=fingerprint, features=list(cfg.features), content_row_ids=True)


def from_dataframe(df) -> Ingested:
    """A caller's DataFrame of raw rows, as a reader would hand it over: with a content row id (unless it
    has one) and no unreadable rows."""
    raw_columns = [c for c in df.columns if c not in INTERNAL_COLUMNS]
    df = _with_corrupt_record(df, _CORRUPT_RECORD, "malformed_row")
    if ROW_ID not in df.columns:
        df = _with_content_row_id(df, raw_columns)
    return Ingested(df=df, input_fingerprint="", features=[], content_row_ids=True)


def _input_files(spark, cfg: DataConfig, url: str) -> list[tuple[str, int, int]]:
    fs = HadoopFs(spark, url)
    if not fs.glob(url):
        raise SparkmlParError(
            f"data.path {cfg.path!r} does not exist (resolved to {url!r}); "
            f"check the path, or use source: digits or synthetic to run without input files"
        )
    files = fs.list_files(url)
    if cfg.source == "images":
        files = [f for f in files if f[0].rsplit(".", 1)[-1].lower() in IMAGE_EXTENSIONS]
    if not files:
        kind, fix = (
            ("image files (.png, .jpg, .jpeg)", "a folder with one subfolder of images per class")
            if cfg.source == "images"
            else ("files", "a non-empty input")
        )
        raise SparkmlParError(f"data.path {cfg.path!r} holds no {kind}; the input is empty; point data.path at {fix}")
    return files


# Spark's error for an input file it cannot read, and the root cause at the end of the Java trace.
# Spark 4 names the file in FAILED_READ_FILE; Spark 3.5 in CANNOT_READ_FILE_FOOTER (schema inference) or in
# parquet-mr's own message (a job's read).
_FAILED_READ = re.compile(
    r"\[FAILED_READ_FILE\.\w+\] Encountered error while reading file (\S+?)\.(?:\s|$)"
    r"|\[CANNOT_READ_FILE_FOOTER\] Could not read footer for file: (\S+?)\.(?:\s|$)"
    r"|RuntimeException: (\S+) is not a Parquet file"
)
_ROOT_CAUSE = re.compile(r"^Caused by: [\w.$]+: (.+)$", re.M)


def unreadable_file_error(exc: BaseException, setting: str, path: str, file_format: str) -> SparkmlParError | None:
    """Spark's error for an input file it cannot read (truncated, or not in the declared format) as an error
    that names the file; None for any other error."""
    text = str(exc)
    failed = _FAILED_READ.search(text)
    if failed is None:
        return None
    file = next(group for group in failed.groups() if group)
    causes = _ROOT_CAUSE.findall(text)
    cause = f" ({causes[-1].strip()})" if causes else ""
    return SparkmlParError(
        f"{setting} {path!r}: cannot read {file!r}{cause}; the file is truncated or "
        f"not {file_format}: write it again or remove it from {setting}"
    )


# The SQL settings of every query over raw rows (prepare's and scoring's), set while they run:
_RAW_ROW_SETTINGS = {
    # Spark's CSV reader parses only the columns a query reads; a row with too few or too many fields is then
    # malformed in a query that reads all columns and well-formed in one that reads a few, so the reason counts
    # and the written quarantine would disagree. Every query over a CSV input parses whole rows instead.
    "spark.sql.csv.parser.columnPruning.enabled": "false",
    # A query over every column of a wide input with its checks compiles to one Java method larger than the
    # JVM's just-in-time compiler takes (8,000 bytes of bytecode), which then runs interpreted, several times
    # slower. At this limit Spark compiles such a query per operator instead, as its documentation suggests
    # for HotSpot JVMs.
    "spark.sql.codegen.hugeMethodLimit": "8000",
}


@contextlib.contextmanager
def reading_raw_rows(spark):
    """Around all Spark work over raw input rows: the settings above, and the session's own back afterwards."""
    previous = {key: spark.conf.get(key, None) for key in _RAW_ROW_SETTINGS}
    for key, value in _RAW_ROW_SETTINGS.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@contextlib.contextmanager
def naming_unreadable_files(cfg: DataConfig):
    """Around Spark work that reads the input: an unreadable file fails with its name, not a Java stack trace.

    Spark reads most files only when a job runs, so this wraps the first job over the input as well as
    the schema inference that reads a footer.
    """
    try:
        yield
    except Exception as exc:
        error = unreadable_file_error(exc, "data.path", cfg.path, cfg.source)
        if error is None:
            raise
        raise error from None


def _with_null_tokens(df, raw_columns: list[str], tokens: list[str]):
    """Text values listed in data.null_values read as missing, as pandas reads an R export's NA or a NaN: the
    label's are then `null:<label>`, a feature's imputed (or `null:<col>` without imputation)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    texts = [c for c in raw_columns if isinstance(df.schema[c].dataType, StringType)]
    if not tokens or not texts:
        return df
    return df.withColumns({c: F.when(column(c).isin(*tokens), F.lit(None)).otherwise(column(c)) for c in texts})


def _with_content_row_id(df, raw_columns: list[str]):
    """A row id from the row's content: the same row gets the same id on every run and cluster, and in
    every format (CSV reads numbers as text, JSON as long or double, Parquet as they were written; JSON
    orders columns by name), so the id hashes canonical values in column-name order."""
    from pyspark.sql import functions as F

    return df.withColumn(ROW_ID, F.xxhash64(*canonical_values(df, sorted(raw_columns))))


def canonical_values(df, names: list[str]) -> list:
    """Per column, the number its value reads as and, when it reads as none, its text: 5, 5.0 and "5"
    hash alike, whatever type the reader gave the column. (Spark's hashes skip a null value, so a column
    of a type that reads as one of the two gives that one alone.)"""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, NumericType, StringType, StructType

    values = []
    for name in names:
        value, dtype = column(name), df.schema[name].dataType
        if isinstance(dtype, NumericType):
            values.append(value.cast("double"))
        elif isinstance(dtype, StringType):
            number = as_number(name)
            values += [number, F.when(number.isNull(), value)]
        elif isinstance(dtype, (ArrayType, MapType, StructType)):
            values.append(F.to_json(value))
        else:
            values.append(value.cast("string"))
    return values


def _with_corrupt_record(df, corrupt: str, reason: str):
    from pyspark.sql import functions as F

    if corrupt not in df.columns:
        return df.withColumns({INGEST_ERROR: F.lit(None).cast("string"), RAW_RECORD: F.lit(None).cast("string")})
    return df.withColumn(INGEST_ERROR, F.when(F.col(corrupt).isNotNull(), F.lit(reason))).withColumnRenamed(
        corrupt, RAW_RECORD
    )


def _csv(spark, cfg: DataConfig, url: str):
    from pyspark.sql.types import StringType, StructField, StructType

    options = {"sep": cfg.csv_sep}
    if cfg.encoding != "utf-8":  # Spark decodes lines again when told any name but its own "UTF-8"
        options["encoding"] = cfg.encoding
    # The header's fields as the file has them (Spark's own header reading renames duplicate names); every
    # column is read as a string so that validation, not the reader, decides what is unparseable.
    first = spark.read.options(**options).option("header", "false").csv(url)
    names = [f"_c{i}" for i in range(len(first.columns))]
    if cfg.csv_header and names:
        names = _header_names(cfg, list(first.first() or ()))
    _require_columns(cfg, names)
    schema = StructType([StructField(n, StringType()) for n in names] + [StructField(_CORRUPT_RECORD, StringType())])
    return (
        spark.read.options(**options)
        .option("header", str(cfg.csv_header).lower())
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", _CORRUPT_RECORD)
        .schema(schema)
        .csv(url)
    )


def _header_names(cfg: DataConfig, fields: list[str | None]) -> list[str]:
    """Column names from the CSV's header line; a field with no name is read as Spark names it, `_c<i>`."""
    names = []
    for i, name in enumerate(fields):
        if name is None or not name.strip():
            log.warning("data.path %r: column %d has no name in the header; it is read as _c%d", cfg.path, i + 1, i)
            name = f"_c{i}"
        names.append(name)
    return names


def _json(spark, cfg: DataConfig, url: str):
    reader = spark.read.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", _CORRUPT_RECORD)
    if cfg.encoding != "utf-8":  # Spark reads lines of another encoding only with their separator given
        reader = reader.option("encoding", cfg.encoding).option("lineSep", "\n")
    with naming_duplicate_columns(cfg):
        df = reader.json(url)
    _require_columns(cfg, [c for c in df.columns if c != _CORRUPT_RECORD])
    return df


def _parquet(spark, cfg: DataConfig, url: str):
    with naming_unreadable_files(cfg), naming_duplicate_columns(cfg):  # schema inference reads a file's footer
        df = spark.read.parquet(url)
    _require_columns(cfg, df.columns)
    return df


def _require_columns(cfg: DataConfig, names: list[str]) -> None:
    """One clear error for column names the pipeline cannot keep apart or would overwrite: none at all, two
    that are equal when case is ignored (as Spark compares them), or one of the pipeline's own."""
    if not names:
        raise SparkmlParError(
            f"data.path {cfg.path!r} has no columns (is the {cfg.source} input empty?); "
            f"point data.path at a non-empty input"
        )
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name.lower() in seen:
            first = seen[name.lower()]
            same = (
                f"are both named {name!r}"
                if name == names[first]
                else (f"({names[first]!r}, {name!r}) have the same name when case is ignored, as Spark compares names")
            )
            raise SparkmlParError(
                f"data.path {cfg.path!r}: columns {first + 1} and {i + 1} {same}; rename one of them in the input"
            )
        seen[name.lower()] = i
    own = [name for name in names if name in _OWN_COLUMNS]
    if own:
        raise SparkmlParError(
            f"data.path {cfg.path!r}: column {own[0]!r} has a name the pipeline gives its own columns "
            f"({', '.join(_OWN_COLUMNS)}); rename it in the input"
        )


@contextlib.contextmanager
def naming_duplicate_columns(cfg: DataConfig):
    """Around a JSON or Parquet reader: two fields whose names differ only in case are one clear error."""
    try:
        yield
    except Exception as exc:
        message = str(exc)
        found = re.search(r"\[COLUMN_ALREADY_EXISTS\] The column (`.*?`) already exists", message)
        # Spark fails to quote a name that holds a backtick for that message, and says so instead (3.5 and 4).
        unquoted = re.search(r"Syntax error in (?:the )?attribute name: (.*?)\.(?:\s|$)", message)
        if found is None and unquoted is None:
            raise
        name = found.group(1) if found else repr(unquoted.group(1))
        raise SparkmlParError(
            f"data.path {cfg.path!r}: two columns have the same name {name} when case is ignored, as Spark "
            f"compares names; rename one of them in the input"
        ) from None


def _with_undecodable_rows(df, raw_columns: list[str]):
    """A row whose text holds U+FFFD, what the reader makes of bytes that are not data.encoding, is
    `undecodable_text` (also where the JSON reader then failed on the line): prepare stops on it with the fix,
    rather than learning from mangled text."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    texts = [column(c) for c in raw_columns if isinstance(df.schema[c].dataType, StringType)] + [F.col(RAW_RECORD)]
    mangled = F.lit(False)
    for text in texts:
        mangled = mangled | F.coalesce(text.contains(UNDECODABLE_CHAR), F.lit(False))
    return df.withColumn(INGEST_ERROR, F.when(mangled, F.lit(UNDECODABLE)).otherwise(F.col(INGEST_ERROR)))


def _images(spark, cfg: DataConfig, url: str, fingerprint: str, known_classes: list[str] | None) -> Ingested:
    """Class-per-subfolder images, decoded and resized in the executors."""
    from pyspark.sql import functions as F

    height, width = cfg.image_size
    channels = cfg.image_channels
    glob = "*.{" + ",".join(IMAGE_EXTENSIONS + tuple(e.upper() for e in IMAGE_EXTENSIONS)) + "}"
    files = (
        spark.read.format("binaryFile").option("recursiveFileLookup", "true").option("pathGlobFilter", glob).load(url)
    )
    parts = F.split(F.col("path"), "/")
    files = files.withColumn("class", F.element_at(parts, -2)).withColumn("file", F.element_at(parts, -1))
    # The class names are an aggregate (one short string per folder), not data.
    classes = known_classes or sorted(r["class"] for r in files.select("class").distinct().collect())
    # pyspark 3.5's F.array_position takes a literal, not a column, as the value.
    position = F.call_function("array_position", F.array(*[F.lit(c) for c in classes]), F.col("class"))
    decoded = files.select(
        F.xxhash64(F.col("class"), F.col("file")).alias(ROW_ID),
        F.concat_ws("/", "class", "file").alias("file"),
        # A folder that is not one of the classes (new images scored by a trained model) has no label.
        F.when(position > 0, position - 1).alias(cfg.label),
        _decode_images_udf(height, width, channels)(F.col("content")).alias("decoded"),
    )
    df = decoded.select(
        ROW_ID,
        "file",
        cfg.label,
        F.col("decoded.features").alias(FEATURES),
        F.when(F.col("decoded.error").isNotNull(), F.lit("undecodable_image")).alias(INGEST_ERROR),
        F.col("decoded.error").alias(RAW_RECORD),
    )
    size = channels * height * width
    return Ingested(
        df=df,
        input_fingerprint=fingerprint,
        features=[ColumnSpec(name=FEATURES, type="vector", size=size, min=0.0, max=1.0)],
        feature_shape=[channels, height, width],
        classes=classes,
    )


def _decode_images_udf(height: int, width: int, channels: int):
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, FloatType, StringType, StructField, StructType

    schema = StructType([StructField("features", ArrayType(FloatType())), StructField("error", StringType())])

    @F.pandas_udf(schema)
    def decode(content):
        import pandas as pd
        from PIL import Image

        from sparkml_par.spark_runtime.python_worker import prepare_worker

        prepare_worker()
        features, errors = [], []
        for data in content:
            try:
                with Image.open(io.BytesIO(data)) as image:
                    image = image.convert("L" if channels == 1 else "RGB").resize((width, height))
                    pixels = np.asarray(image, dtype=np.float32) / 255.0
                # Channels first, like torchvision, so features reshape to [C, H, W].
                features.append(pixels.reshape(height, width, channels).transpose(2, 0, 1).ravel())
                errors.append(None)
            except Exception as exc:  # any file PIL cannot decode goes to quarantine with its cause
                features.append(None)
                errors.append(f"{type(exc).__name__}: {exc}"[:500])
        return pd.DataFrame({"features": features, "error": errors})

    return decode


def _digits(spark, cfg: DataConfig, fingerprint: str) -> Ingested:
    """scikit-learn's 8x8 handwritten digits, scaled from 0..16 to 0..1."""
    from pyspark.sql.types import ArrayType, FloatType, LongType, StructField, StructType
    from sklearn.datasets import load_digits

    digits = load_digits()
    features = (digits.data / 16.0).astype(np.float32)
    rows = [(i, features[i].tolist(), int(digits.target[i])) for i in range(len(features))]
    schema = StructType(
        [
            StructField(ROW_ID, LongType(), False),
            StructField(FEATURES, ArrayType(FloatType())),
            StructField(cfg.label, LongType()),
        ]
    )
    df = _with_corrupt_record(spark.createDataFrame(rows, schema), "_corrupt_record", "")
    return Ingested(
        df=df,
        input_fingerprint=fingerprint,
        features=[ColumnSpec(name=FEATURES, type="vector", size=64, min=0.0, max=1.0)],
        feature_shape=[1, 8, 8],
    )


def _synthetic(spark, cfg: DataConfig, fingerprint: str) -> Ingested:
    """Gaussian class clusters (or a noisy linear target), generated in the executors."""
    from pyspark.sql.types import ArrayType, FloatType, LongType, StructField, StructType

    s = cfg.synthetic
    rows, dims, classes, seed = s.rows, s.features, s.classes, s.seed
    # Model parameters (class centres or regression weights) are small and drawn on the driver.
    params = np.random.default_rng([seed, 0]).normal(0.0, 1.0, size=(max(classes, 1), dims)).astype(np.float32)
    label_type = LongType() if classes else FloatType()
    schema = StructType(
        [
            StructField(ROW_ID, LongType(), False),
            StructField(FEATURES, ArrayType(FloatType())),
            StructField(cfg.label, label_type),
        ]
    )
    blocks = -(-rows // _SYNTHETIC_BLOCK_ROWS)
    partitions = s.partitions or spark.sparkContext.defaultParallelism
    block_rows = _SYNTHETIC_BLOCK_ROWS

    def generate(batches):
        import pyarrow as pa

        from sparkml_par.spark_runtime.python_worker import prepare_worker

        prepare_worker()
        for batch in batches:
            for block in batch.column(0).to_numpy():
                start = int(block) * block_rows
                n = min(block_rows, rows - start)
                rng = np.random.default_rng([seed, 1, int(block)])
                noise = rng.standard_normal((n, dims), dtype=np.float32)
                if classes:
                    label = rng.integers(0, classes, n)
                    x = params[label] + noise
                    y = pa.array(label.astype(np.int64))
                else:
                    x = noise
                    y = pa.array((x @ params[0] + 0.1 * rng.standard_normal(n)).astype(np.float32))
                offsets = pa.array(np.arange(0, (n + 1) * dims, dims, dtype=np.int32))
                values = pa.ListArray.from_arrays(offsets, pa.array(x.ravel()))
                ids = pa.array(np.arange(start, start + n, dtype=np.int64))
                yield pa.RecordBatch.from_arrays([ids, values, y], names=schema.names)

    df = spark.range(0, blocks, 1, numPartitions=min(partitions, blocks)).mapInArrow(generate, schema)
    df = _with_corrupt_record(df, _CORRUPT_RECORD, "")
    return Ingested(
        df=df,
        input_fingerprint=fingerprint,
        features=[ColumnSpec(name=FEATURES, type="vector", size=dims)],
        feature_shape=[dims],
    )
