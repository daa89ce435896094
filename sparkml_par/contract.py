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
FEATURE_PIPELINE_DIR = "feature_pipeline"
# Beside the output (a sibling): rows rejected when too many failed validation or scoring.
REJECTED_SUFFIX = ".rejected"

# Files of a training output directory and of its model artifact.
TRAIN_METRICS = "metrics.jsonl"
MODEL_DIR = "model"
WEIGHTS = "weights.pt"
MODEL_DESCRIPTION = "model.json"
MODEL_METRICS = "metrics.json"
CONFIG_COPY = "config.yaml"

# Columns and files of scoring's output.
PREDICTION = "prediction"
PROBABILITIES = "probabilities"
# The original label a class index stands for, when the labels were strings or sparse numbers.
PREDICTED_LABEL = "predicted_label"
SCORE_METRICS = "_metrics.json"
# Raw rows to score that the dataset's checks reject; `_` keeps Parquet readers of the predictions out of it.
SCORE_QUARANTINE_DIR = "_quarantine"

# Fields of `_manifest.json` that readers look up (the writer, data_prep.job, writes these and more).
MANIFEST_LABEL = "label_column"
MANIFEST_SPLIT_KEY = "split_key"
# A regression label's mean and standard deviation over the train split.
MANIFEST_LABEL_SCALE = "label_scale"
MANIFEST_TASK = "task"
MANIFEST_NUM_CLASSES = "num_classes"
MANIFEST_CLASSES = "classes"
MANIFEST_FEATURE_SHAPE = "feature_shape"
MANIFEST_SPLITS = "splits"
MANIFEST_FEATURE_PIPELINE = "feature_pipeline"
MANIFEST_RAW_COLUMNS = "raw_feature_columns"
MANIFEST_RAW_TYPES = "raw_feature_types"
MANIFEST_IMPUTE = "impute"
MANIFEST_SOURCE = "source"
MANIFEST_READ_OPTIONS = "read_options"
MANIFEST_FINGERPRINT = "fingerprint"
# Who wrote the dataset and may replace it without data.mode=overwrite: a pipeline's run directory, or null.
MANIFEST_OWNER = "owner"
