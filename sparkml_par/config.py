"""Typed configuration: YAML files in conf/ mapped onto one dataclass per section.

Precedence is defaults < YAML file < command-line `section.field=value` overrides. Every value is
checked against its field's type, allowed choices and bounds, and every error names the key path,
the bad value and what is allowed. Files are parsed with `yaml.safe_load` and never executed.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

import yaml

from sparkml_par.contract import ROW_ID
from sparkml_par.errors import ConfigError


def _field(default: Any, doc: str, *, minimum: float | None = None, maximum: float | None = None):
    """A config field with its one-line documentation and optional numeric bounds."""
    meta = {"doc": doc, "min": minimum, "max": maximum}
    if isinstance(default, type):  # a nested section: a fresh instance per config
        return field(default_factory=default, metadata=meta)
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


# What pandas.read_csv reads as missing by default (its na_values), so an export from R (NA), Excel (#N/A) or
# pandas (NaN, <NA>) means the same here.
NULL_VALUES = (
    "",
    "#N/A",
    "#N/A N/A",
    "#NA",
    "-1.#IND",
    "-1.#QNAN",
    "-NaN",
    "-nan",
    "1.#IND",
    "1.#QNAN",
    "<NA>",
    "N/A",
    "NA",
    "NULL",
    "NaN",
    "None",
    "n/a",
    "nan",
    "null",
)


@dataclass
class SparkConfig:
    master: str = _field("local[2]", "Spark master URL; local[N] is the embedded default, no cluster needed.")
    app_name: str = _field("sparkml_par", "Spark application name.")
    conf: dict[str, str] = _field({}, "Any spark.* setting, passed to the session builder as is.")
    use_gpu: bool = _field(False, "Request GPU resources: one GPU per barrier task.")
    gpus_per_executor: int = _field(1, "spark.executor.resource.gpu.amount when use_gpu is on.", minimum=1)
    gpu_discovery_script: Optional[str] = _field(
        None, "Script that prints the executor's GPU addresses as Spark expects (resource discovery)."
    )


@dataclass
class ColumnSpec:
    name: str = _field("", "Column name in the raw input.")
    type: Literal["float", "int", "bool", "string", "timestamp", "date", "vector"] = _field(
        "float",
        "Expected type after parsing; a timestamp becomes its year, month, day, day of week and hour, a date "
        "the same but the hour, a bool 0 or 1.",
    )
    format: Optional[str] = _field(
        None, "Spark datetime pattern of a timestamp or date column (yyyy-MM-dd HH:mm); unset reads ISO 8601."
    )
    min: Optional[float] = _field(None, "Smallest valid value (rows below it are quarantined).")
    max: Optional[float] = _field(None, "Largest valid value (rows above it are quarantined).")
    categories: Optional[list[str]] = _field(None, "Allowed values of a string column; others are quarantined.")
    size: Optional[int] = _field(None, "Length of a vector column.", minimum=1)


@dataclass
class SyntheticConfig:
    rows: int = _field(10000, "Rows to generate.", minimum=1)
    features: int = _field(32, "Float features per row.", minimum=1)
    classes: int = _field(10, "Number of label classes (0 means a regression target).", minimum=0)
    seed: int = _field(0, "Generator seed: the same seed gives the same rows on any cluster.")
    partitions: int = _field(0, "Spark partitions to generate in; 0 means the default parallelism.", minimum=0)


@dataclass
class SplitConfig:
    train: float = _field(0.8, "Fraction of rows in the train split.", minimum=0.0, maximum=1.0)
    validation: float = _field(0.1, "Fraction of rows in the validation split.", minimum=0.0, maximum=1.0)
    test: float = _field(0.1, "Fraction of rows in the test split.", minimum=0.0, maximum=1.0)
    key: Optional[str] = _field(None, "Column whose hash decides the split; None hashes a row id built from the data.")
    seed: int = _field(42, "Salt of the split hash.")


@dataclass
class FeaturizeConfig:
    impute: Literal["none", "mean", "median"] = _field("none", "Fill missing numeric features with this statistic.")
    max_categories: int = _field(
        100,
        "Categories kept per text column, the most frequent in train; the rest become <other>. 0 keeps all.",
        minimum=0,
    )
    one_hot: bool = _field(True, "One-hot encode indexed string columns.")
    scale: bool = _field(True, "Standard-scale the assembled feature vector.")


@dataclass
class DataConfig:
    source: Literal["csv", "json", "parquet", "images", "digits", "synthetic"] = _field(
        "digits", "Where rows come from: a file format read by Spark, or a built-in source."
    )
    path: Optional[str] = _field(None, "Input URL for csv/json/parquet/images (any URL Spark reads).")
    csv_header: bool = _field(True, "The CSV's first line names the columns.")
    csv_sep: str = _field(",", "CSV field separator.")
    encoding: Literal["utf-8", "iso-8859-1", "us-ascii"] = _field(
        "utf-8", "Character encoding of CSV and JSON files; a row with bytes that do not decode is an error."
    )
    null_values: list[str] = _field(
        list(NULL_VALUES), "Text read as missing in CSV and JSON (pandas' defaults); [] reads only empty as missing."
    )
    label: str = _field("label", "Label column.")
    task: Literal["classification", "regression"] = _field("classification", "What the label is.")
    num_classes: int = _field(0, "Classes of a classification label; 0 means read from the data.", minimum=0)
    features: list[ColumnSpec] = _field([], "Feature columns with types, ranges and categories; empty means all.")
    image_size: list[int] = _field([8, 8], "Height and width images are resized to.")
    image_channels: Literal[1, 3] = _field(1, "Channels images are decoded to: 1 grayscale, 3 RGB.")
    synthetic: SyntheticConfig = _field(SyntheticConfig, "Settings of the synthetic source.")
    max_reject_fraction: float = _field(
        0.1, "Fail the job when more than this fraction of rows is quarantined.", minimum=0.0, maximum=1.0
    )
    dedupe: bool = _field(False, "Drop exact duplicate rows (they are counted in the profile either way).")
    featurize: FeaturizeConfig = _field(FeaturizeConfig, "Spark ML feature pipeline, fitted on the train split.")
    split: SplitConfig = _field(SplitConfig, "Deterministic train/validation/test split.")
    row_group_size_mb: float = _field(
        4.0, "Target Parquet row-group size (each file holds one row group).", minimum=0.01
    )
    max_shards: int = _field(
        8, "Largest rank count the dataset is laid out for; any divisor gets equal shares.", minimum=1
    )
    output: str = _field("runs/latest/dataset", "Dataset directory (any URL Spark and pyarrow read).")
    mode: Literal["error", "overwrite"] = _field("error", "What to do when the output holds a different dataset.")


@dataclass
class EarlyStoppingConfig:
    monitor: str = _field("val_loss", "Metric to watch, e.g. val_loss or val_accuracy.")
    mode: Literal["min", "max"] = _field("min", "Whether smaller or larger is better.")
    patience: int = _field(0, "Epochs without improvement before stopping; 0 turns early stopping off.", minimum=0)
    min_delta: float = _field(0.0, "Smallest change that counts as an improvement.", minimum=0.0)


@dataclass
class TrainConfig:
    model: str = _field("mlp", "Registry name (mlp, cnn, transformer) or an import path 'pkg.module:build'.")
    model_args: dict[str, Any] = _field({}, "Keyword arguments of the model builder.")
    num_proc: int = _field(2, "Horovod ranks; 0 means all task slots of the cluster.", minimum=0)
    min_proc: int = _field(
        0,
        "Fewest ranks training goes on with when hosts are lost (barrier launcher); 0 means num_proc, so a lost "
        "host ends the run.",
        minimum=0,
    )
    launcher: Literal["barrier", "local"] = _field(
        "barrier", "barrier runs ranks as Spark barrier tasks; local runs them as processes on the driver."
    )
    epochs: int = _field(5, "Passes over the train split.", minimum=1)
    max_steps: int = _field(0, "Stop after this many optimizer steps; 0 means no limit.", minimum=0)
    batch_size: int = _field(64, "Global batch size, split evenly across ranks.", minimum=1)
    optimizer: Literal["sgd", "adam", "adamw"] = _field("adam", "Optimizer.")
    lr: float = _field(1e-3, "Base learning rate for one rank (see lr_scaling).", minimum=0.0)
    momentum: float = _field(0.9, "SGD momentum.", minimum=0.0)
    nesterov: bool = _field(False, "Nesterov momentum for SGD.")
    weight_decay: float = _field(0.0, "Weight decay.", minimum=0.0)
    lr_scaling: Literal["linear", "sqrt", "none"] = _field("linear", "How the learning rate grows with ranks.")
    warmup_epochs: float = _field(
        0.0, "Linear warm-up from lr/size to the scaled lr over this many epochs.", minimum=0.0
    )
    scheduler: Literal["none", "step", "exponential", "cosine", "plateau"] = _field("none", "LR schedule.")
    step_size: int = _field(1, "Epochs between decays of the step scheduler.", minimum=1)
    gamma: float = _field(0.1, "Decay factor of the step, exponential and plateau schedulers.", minimum=0.0)
    plateau_patience: int = _field(2, "Epochs without improvement before the plateau scheduler decays.", minimum=0)
    precision: Literal["fp32", "bf16", "fp16"] = _field("fp32", "bf16 autocast (CPU/GPU) or fp16 with a scaler (GPU).")
    grad_clip: float = _field(0.0, "Clip the gradient norm to this; 0 turns clipping off.", minimum=0.0)
    accumulation_steps: int = _field(1, "Backward passes per optimizer step (gradient accumulation).", minimum=1)
    fp16_compression: bool = _field(False, "Compress gradients to fp16 for the all-reduce.")
    sync_batchnorm: bool = _field(False, "Convert BatchNorm layers to Horovod SyncBatchNorm.")
    shuffle: bool = _field(True, "Shuffle row groups and rows each epoch (seeded).")
    shuffle_buffer: int = _field(1024, "Rows in the shuffle buffer of each rank's reader.", minimum=0)
    cache: bool = _field(False, "Keep each rank's shard in memory after the first epoch.")
    early_stopping: EarlyStoppingConfig = _field(EarlyStoppingConfig, "Early stopping on a validation metric.")
    checkpoint_every: int = _field(1, "Write a checkpoint every N epochs.", minimum=1)
    checkpoint_every_steps: int = _field(
        1000, "Also write one every N optimizer steps, with the position inside the epoch; 0 turns them off.", minimum=0
    )
    keep_checkpoints: int = _field(3, "Checkpoints kept; older ones are deleted.", minimum=1)
    resume: Literal["auto", "never"] = _field("auto", "auto resumes from the newest complete checkpoint.")
    pipeline_stages: int = _field(
        1, "Split the model into this many consecutive stages (model parallelism).", minimum=1
    )
    pipeline_boundaries: list[int] = _field(
        [], "Layer indexes where stages start; empty balances stages by parameter count."
    )
    micro_batches: int = _field(1, "Micro-batches per batch in the stage pipeline.", minimum=1)
    seed: int = _field(0, "Seed of weights, shuffling and dropout.")
    threads_per_rank: int = _field(1, "torch intra-op threads per rank.", minimum=1)
    timeout: float = _field(3600.0, "Seconds the whole training stage may take.", minimum=1.0)
    step_timeout: float = _field(
        600.0, "Fail the stage when a rank makes no step for this many seconds; 0 turns the guard off.", minimum=0.0
    )
    output: str = _field("runs/latest/model", "Directory of checkpoints, metrics and the model artifact.")


@dataclass
class ParamSpace:
    type: Literal["uniform", "loguniform", "int", "choice"] = _field("uniform", "Distribution of the parameter.")
    low: Optional[float] = _field(None, "Lower bound (uniform, loguniform, int).")
    high: Optional[float] = _field(None, "Upper bound (uniform, loguniform, int).")
    values: Optional[list[Any]] = _field(None, "Choices (choice), also the grid points of grid search.")
    grid: int = _field(3, "Points per numeric range in grid search.", minimum=1)


@dataclass
class TuneConfig:
    method: Literal["grid", "random", "bayes"] = _field("bayes", "Search method; bayes uses Optuna's TPE.")
    trials: int = _field(8, "Trial budget (grid search runs the whole grid).", minimum=1)
    parallelism: int = _field(2, "Trials run at once as Spark tasks.", minimum=1)
    space: dict[str, ParamSpace] = _field({}, "Search space: train.* key -> distribution.")
    metric: str = _field("val_loss", "Metric each trial reports.")
    direction: Literal["minimize", "maximize"] = _field("minimize", "Whether smaller or larger is better.")
    prune: bool = _field(False, "Stop weak trials early on intermediate validation scores.")
    seed: int = _field(0, "Sampler seed.")
    retrain: bool = _field(False, "Retrain the best config with train.num_proc Horovod ranks.")
    output: str = _field("runs/latest/tune", "Directory of the study, the trials table and the best config.")


@dataclass
class ScoreConfig:
    input: Optional[str] = _field(
        None, "Dataset, Parquet or raw CSV/JSON lines/image path to score; None scores the dataset's test split."
    )
    source: Optional[Literal["csv", "json", "parquet", "images"]] = _field(
        None, "Format of raw score.input files; None tells it from a dataset, Parquet, or the files' extensions."
    )
    model: Optional[str] = _field(None, "Model artifact directory; None uses train.output.")
    id_column: str = _field(ROW_ID, "Column joined to each prediction.")
    batch_size: int = _field(1024, "Rows per model call inside the UDF.", minimum=1)
    output: str = _field("runs/latest/predictions", "Parquet directory of predictions.")


@dataclass
class OutputConfig:
    run_dir: str = _field("runs/latest", "Directory of this run: effective config, stage outputs, logs.")
    log_format: Literal["text", "json"] = _field("text", "Progress lines as text or JSON (for schedulers).")
    quiet: bool = _field(False, "Only warnings and the final summary.")
    from_stage: Optional[Literal["prepare", "tune", "train", "score", "report"]] = _field(
        None, "sparkml-par run: run this stage and every later one even if unchanged (--from STAGE)."
    )


@dataclass
class TrackingConfig:
    tracking_uri: Optional[str] = _field(
        None, "MLflow tracking server (http://host:5000, databricks, ${MLFLOW_TRACKING_URI}); None = no tracking."
    )
    experiment: str = _field("sparkml_par", "MLflow experiment of the runs (created when missing).")
    run_name: Optional[str] = _field(None, "Name of the pipeline's MLflow run; None lets MLflow pick one.")
    tags: dict[str, str] = _field({}, "Tags set on the pipeline's MLflow run (team, dataset version, ...).")
    register_model: Optional[str] = _field(None, "Register the trained model under this registry name; None = no.")
    required: bool = _field(False, "Fail before any work if the server does not answer, instead of running untracked.")


@dataclass
class Config:
    spark: SparkConfig = _field(SparkConfig, "Spark session.")
    data: DataConfig = _field(DataConfig, "Data preparation.")
    train: TrainConfig = _field(TrainConfig, "Distributed training.")
    tune: TuneConfig = _field(TuneConfig, "Hyperparameter search.")
    score: ScoreConfig = _field(ScoreConfig, "Batch scoring.")
    output: OutputConfig = _field(OutputConfig, "Run directory and logging.")
    tracking: TrackingConfig = _field(TrackingConfig, "Experiment tracking in MLflow (optional).")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


_ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Defaults, then the YAML file, then `section.key=value` overrides; validated as a whole."""
    raw: dict[str, Any] = {}
    if path is not None:
        raw = _read_yaml(Path(path))
    for override in overrides:
        _apply_override(raw, override)
    return _build(Config, _interpolate_env(raw, ""), "")


def data_config_from_dict(raw: dict[str, Any]) -> DataConfig:
    """A data section saved as a plain dict (a dataset's manifest keeps the one it was prepared with)."""
    return _build(DataConfig, raw, "data")


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist; pass a YAML file such as conf/quickstart.yaml")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.constructor.ConstructorError as exc:
        raise ConfigError(
            f"config file {str(path)!r} uses a YAML tag that builds objects ({_yaml_problem(exc)}); "
            f"config files hold plain values only"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {_yaml_problem(exc)}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of sections, got {type(raw).__name__}")
    return raw


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's problem and position on one line (its own text spans several lines)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        return f"{exc.problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else exc.problem
    return " ".join(str(exc).split())


def _apply_override(raw: dict[str, Any], override: str) -> None:
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {override!r} is not of the form section.key=value (e.g. train.epochs=3)")
    value = _parse_override_value(override, text)
    parts = key.strip().split(".")
    node = raw
    hint: Any = Config
    for i, part in enumerate(parts[:-1]):
        if _origin(hint) is dict:  # part names an entry of a dict of sections: tune.space.lr.type=uniform
            hint = typing.get_args(hint)[1]
        else:
            hint = _field_type(_unwrap_optional(hint), part)
        node = _override_section(node, part, override, parts[: i + 1])
        if _origin(hint) is dict and not dataclasses.is_dataclass(typing.get_args(hint)[1]):
            # The rest of the path is one dict key: spark.conf.spark.sql.shuffle.partitions=4
            node[".".join(parts[i + 1 :])] = value
            return
    node[parts[-1]] = value


def _parse_override_value(override: str, text: str) -> Any:
    """The value as YAML reads it (numbers, booleans, lists); an empty value is the empty string."""
    if not text.strip():
        return ""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"override {override!r}: the value is not valid YAML ({_yaml_problem(exc)}); quote it to pass a string"
        ) from None


def _override_section(node: dict[str, Any], part: str, override: str, path: list[str]) -> dict[str, Any]:
    child = node.setdefault(part, {})
    if not isinstance(child, dict):
        raise ConfigError(f"override {override!r}: {'.'.join(path)} is not a section")
    return child


def _field_type(cls: Any, name: str) -> Any:
    if cls is None or not dataclasses.is_dataclass(cls):
        return None
    return typing.get_type_hints(cls).get(name)


def _interpolate_env(value: Any, path: str) -> Any:
    if isinstance(value, dict):
        return {k: _interpolate_env(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate_env(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):

        def substitute(match: re.Match) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise ConfigError(
                f"{path}: environment variable {name!r} is not set; export it or write ${{{name}:-default}}"
            )

        result, count = _ENV_PATTERN.subn(substitute, value)
        return _FromEnv(result) if count else result
    return value


class _FromEnv(str):
    """A string ${VAR} interpolation produced: a number or boolean field parses it as YAML would."""


def _from_env(value: _FromEnv, hint: Any) -> Any:
    text = str(value)  # a plain str again: yaml.safe_dump refuses str subclasses
    if _unwrap_optional(hint) not in (bool, int, float):
        return text
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return parsed if isinstance(parsed, (bool, int, float)) else text


def _origin(hint: Any) -> Any:
    return typing.get_origin(hint)


def _unwrap_optional(hint: Any) -> Any:
    if _origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _build(cls: type, raw: Any, path: str) -> Any:
    if raw is None:  # an empty section in YAML (`tune:` with nothing under it) keeps its defaults
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping of keys, got {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in raw.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in fields:
            raise ConfigError(_unknown_key_message(key_path, str(key), list(fields)))
        values[key] = _coerce(value, hints[key], key_path, fields[key].metadata)
    instance = cls(**values)
    _check_section(instance, path)
    return instance


def _unknown_key_message(key_path: str, key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key {key_path!r}: {hint}valid keys here are {', '.join(valid)}"


def _coerce(value: Any, hint: Any, path: str, meta: typing.Mapping[str, Any]) -> Any:
    if isinstance(value, _FromEnv):
        value = _from_env(value, hint)
    origin = _origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(hint):
            return None
        return _coerce(value, _unwrap_optional(hint), path, meta)
    if hint is Any:
        return value
    if origin is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
            hint_text = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{path}: {value!r} is not allowed{hint_text}; choose one of {', '.join(map(repr, allowed))}"
            )
        return value
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, path)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        _, value_hint = typing.get_args(hint)
        if value_hint is str:  # spark.* settings: numbers and booleans become Spark's strings
            return {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items()}
        return {str(k): _coerce(v, value_hint, f"{path}.{k}", {}) for k, v in value.items()}
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {value!r}")
        (item_hint,) = typing.get_args(hint)
        return [_coerce(v, item_hint, f"{path}[{i}]", {}) for i, v in enumerate(value)]
    return _coerce_scalar(value, hint, path, meta)


def _coerce_scalar(value: Any, hint: type, path: str, meta: typing.Mapping[str, Any]) -> Any:
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        value = float(value)
    elif hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r} (quote it in YAML)")
        return value
    low, high = meta.get("min"), meta.get("max")
    if low is not None and value < low:
        raise ConfigError(f"{path}: {value!r} is below the minimum {low!r}; use a value >= {low!r}")
    if high is not None and value > high:
        raise ConfigError(f"{path}: {value!r} is above the maximum {high!r}; use a value <= {high!r}")
    return value


def _check_section(section: Any, path: str) -> None:
    """Checks that span several fields of one section."""
    if isinstance(section, SplitConfig):
        total = section.train + section.validation + section.test
        if abs(total - 1.0) > 1e-6:
            raise ConfigError(
                f"{path}: train + validation + test = {section.train} + {section.validation} + {section.test}"
                f" = {total:g}; the fractions must add up to 1"
            )
    elif isinstance(section, ParamSpace):
        if section.type == "choice" and not section.values:
            raise ConfigError(f"{path}: a choice parameter needs a non-empty 'values' list")
        if section.type != "choice" and (section.low is None or section.high is None or section.low >= section.high):
            raise ConfigError(
                f"{path}: type {section.type!r} needs low < high, got low={section.low!r} high={section.high!r}"
            )
        if section.type == "loguniform" and section.low is not None and section.low <= 0:
            raise ConfigError(f"{path}: a loguniform parameter needs low > 0, got {section.low!r}")
    elif isinstance(section, TrainConfig):
        if section.optimizer == "sgd" and section.nesterov and section.momentum <= 0:
            raise ConfigError(f"train.nesterov=true needs train.momentum > 0, got {section.momentum!r}")
        if section.scheduler == "plateau" and section.gamma >= 1.0:
            raise ConfigError(
                f"train.gamma={section.gamma!r}: the plateau scheduler multiplies the learning rate by "
                f"gamma when the metric stalls, so gamma must be below 1"
            )
        if section.min_proc and section.num_proc and section.min_proc > section.num_proc:
            raise ConfigError(
                f"{path}.min_proc: {section.min_proc} is more than num_proc={section.num_proc}; use at most "
                f"num_proc (0 means num_proc: no training on fewer ranks)"
            )
        if section.min_proc and section.launcher == "local":
            raise ConfigError(
                f"{path}.min_proc: training on fewer ranks follows the hosts of a cluster, so it needs "
                f"launcher=barrier; set min_proc to 0 with launcher=local"
            )
    elif isinstance(section, DataConfig):
        if section.source in ("csv", "json", "parquet", "images") and not section.path:
            raise ConfigError(
                f"{path}.path: source {section.source!r} reads files, so data.path must be set "
                f"(any URL Spark reads, e.g. file:///data/train.csv)"
            )
        if len(section.image_size) != 2 or min(section.image_size) < 1:
            raise ConfigError(
                f"{path}.image_size: expected [height, width] of positive integers, got {section.image_size!r}"
            )


def describe(cls: type = Config, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key path, default, doc) of every field: the config reference."""
    rows = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        hint = _unwrap_optional(typing.get_type_hints(cls)[f.name])
        if dataclasses.is_dataclass(hint):
            rows.extend(describe(hint, key + "."))
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        rows.append((key, repr(default), f.metadata.get("doc", "")))
    return rows
