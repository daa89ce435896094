"""The names the stages agree on: dataset columns, file names, and the fields of a dataset's manifest.

The writer (data_prep) and every reader (train, tune, infer, report, pipeline) import them from here,
so a name changes in one place. A user's own column names (the label, the split key, an id column)
come from the config and are recorded in the manifest under the fields below; readers take them from
there, never from a default.
"""

from __future__ import annotations

# Columns of a prepared dataset (besides the user's label column, named by MANIFEST_LABEL).
FEATURES = "features"
ROW_ID = "_row_id"

# Columns of raw rows while they are validated, and of the quarantine dataset.
INGEST_ERROR = "_ingest_error"
RAW_RECORD = "_raw_record"
REJECT_REASON = "_reject_reason"
INTERNAL_COLUMNS = (ROW_ID, INGEST_ERROR, RAW_RECORD)

# Splits, and the helper column that carries a row's split while the dataset is written.
SPLIT = "_split"
SPLITS = ("train", "validation", "test")

# Files and folders of a dataset directory.
MANIFEST = "_manifest.json"
PROFILE = "profile.json"
QUARANTINE_DIR = "quarantine"
# Beside the output (a sibling): rows rejected when too many failed validation or scoring.
REJECTED_SUFFIX = ".rejected"

# Files of a training output directory and of its model artifact.
TRAIN_METRICS = "metrics.jsonl"
MODEL_DIR = "model"
WEIGHTS = "weights.pt"
COMPLETE_MARKER = "_COMPLETE"  # written last into a directory published on an object store (sparkml_par.io.store)
MODEL_DESCRIPTION = "model.json"
MODEL_METRICS = "metrics.json"
CONFIG_COPY = "config.yaml"

# Files of a pipeline run directory besides CONFIG_COPY: the driver's log (the project's and Spark's).
RUN_LOG = "run.log"

# Columns and files of scoring's output.
PREDICTION = "prediction"
PROBABILITIES = "probabilities"
# The original label a class index stands for, when the labels were strings or sparse numbers.
PREDICTED_LABEL = "predicted_label"
SCORE_METRICS = "_metrics.json"
# Raw rows to score that the dataset's checks reject; `_` keeps Parquet readers of the predictions out of it.
SCORE_QUARANTINE_DIR = "_quarantine"

# Fields of `_manifest.json`: written by data_prep.job, read by every later stage.
MANIFEST_FORMAT_VERSION = "format_version"  # the layout version of the dataset directory
MANIFEST_CREATED = "created"  # when the dataset was published (UTC, ISO 8601)
MANIFEST_FINGERPRINT = "fingerprint"  # hash of the data config and the input: equal fingerprints, equal datasets
# hash of the input files' names, sizes and times (or of a built-in source's parameters)
MANIFEST_INPUT_FINGERPRINT = "input_fingerprint"
MANIFEST_SOURCE = "source"  # data.source it was read from
MANIFEST_LABEL = "label_column"  # the user's label column, as named in the input and in every split
MANIFEST_SPLIT_KEY = "split_key"  # data.split.key, kept as a column of every split (or null)
MANIFEST_LABEL_SCALE = "label_scale"  # a regression label's train-split mean and standard deviation (or null)
MANIFEST_FEATURE_COLUMN = "feature_column"  # the features column
MANIFEST_TASK = "task"  # classification or regression
MANIFEST_NUM_CLASSES = "num_classes"  # classes of a classification label (0 for regression)
MANIFEST_CLASSES = "classes"  # names of the classes 0..K-1 when labels were text or image folders, else null
MANIFEST_CLASS_COUNTS = "class_counts"  # clean rows per class id
MANIFEST_CLASS_WARNINGS = "class_warnings"  # class ids without rows and rare classes, as the summary says them
MANIFEST_FEATURE_SHAPE = "feature_shape"  # the model's input shape ([C, H, W] for images)
MANIFEST_SPLITS = "splits"  # split name -> path, rows, row groups and rows per file
MANIFEST_MAX_SHARDS = "max_shards"  # data.max_shards the row groups were laid out for
MANIFEST_FEATURE_PIPELINE = "feature_pipeline"  # the feature pipeline as numbers (featurize.build_pipeline; or null)
MANIFEST_RAW_COLUMNS = "raw_feature_columns"  # the raw columns the features are built from
MANIFEST_RAW_TYPES = "raw_feature_types"  # their validated types
MANIFEST_CATEGORIES = "categories"  # text feature -> its distinct values in train and how many are kept
MANIFEST_LEFT_OUT = "left_out_columns"  # inferred features left out (unique per row) -> why
MANIFEST_DATA_CONFIG = "data_config"  # the data config as validated: scoring reads raw rows by these rules
MANIFEST_ROWS_IN = "rows_in"  # input rows
MANIFEST_ROWS_CLEAN = "rows_clean"  # rows that passed validation
MANIFEST_DUPLICATES = "duplicates"  # clean rows repeating an earlier row
MANIFEST_QUARANTINE = "quarantine"  # path, rows and rows per reason of the quarantine dataset
MANIFEST_PROFILE = "profile"  # path of profile.json
# who may replace the dataset without data.mode=overwrite: a pipeline's run directory, or null
MANIFEST_OWNER = "owner"


def quoted(name: str) -> str:
    """A user's column name as a Spark SQL identifier: a name with dots, spaces, backticks or a reserved word
    refers to that one top-level column, in an expression and in the Column API alike."""
    return "`" + name.replace("`", "``") + "`"


def column(name: str):
    """The top-level column `name` of a DataFrame, whatever characters the name holds."""
    from pyspark.sql import functions as F

    return F.col(quoted(name))


def as_number(name: str):
    """A text column's values as doubles, null where a value does not read as a number (try_cast).

    Spark answers a failed cast by throwing and catching an exception, per value; a value that begins with a
    letter (a category, a word) is null without one. Only inf, infinity and nan begin with a letter (i, n).
    """
    from pyspark.sql import functions as F

    first = F.ascii(column(name))
    word = first.between(65, 90) | first.between(97, 122)
    return F.when(~word | first.isin(73, 78, 105, 110), F.expr(f"try_cast({quoted(name)} AS double)"))
