"""The typed config: defaults < YAML file < overrides, parsing, interpolation and every error message."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sparkml_par.config import Config, ParamSpace, TrainConfig, describe, load_config
from sparkml_par.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
TRAIN_KEYS = ", ".join(f.name for f in dataclasses.fields(TrainConfig))
SECTIONS = "spark, data, train, tune, score, output, tracking"


@pytest.fixture
def write_yaml(tmp_path):
    def write(text: str, name: str = "conf.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def config_error(*overrides: str, path: Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, list(overrides))
    return str(info.value)


# --- defaults, files and precedence ---------------------------------------------------------------


def test_defaults():
    cfg = load_config()
    assert cfg == Config()
    assert cfg.spark.master == "local[2]"
    assert cfg.data.source == "digits"
    assert cfg.train.epochs == 5 and cfg.train.lr == 1e-3 and cfg.train.shuffle is True
    assert (cfg.data.split.train, cfg.data.split.validation, cfg.data.split.test) == (0.8, 0.1, 0.1)
    assert cfg.tune.space == {} and cfg.spark.conf == {}


def test_defaults_are_not_shared_between_configs():
    first, second = load_config(), load_config()
    first.spark.conf["spark.x"] = "1"
    first.data.image_size.append(3)
    assert second.spark.conf == {} and second.data.image_size == [8, 8]


def test_yaml_file_sets_nested_values(write_yaml):
    cfg = load_config(
        write_yaml("""
spark:
  master: local[4]
  conf:
    spark.sql.shuffle.partitions: 4
    spark.sql.adaptive.enabled: false
data:
  source: synthetic
  synthetic: {rows: 500, features: 8}
  features:
    - {name: age, type: int, min: 0, max: 120}
tune:
  space:
    lr: {type: loguniform, low: 0.0001, high: 0.1}
""")
    )
    assert cfg.spark.master == "local[4]"
    assert cfg.spark.conf == {"spark.sql.shuffle.partitions": "4", "spark.sql.adaptive.enabled": "false"}
    assert (cfg.data.synthetic.rows, cfg.data.synthetic.features, cfg.data.synthetic.classes) == (500, 8, 10)
    assert cfg.data.features[0].name == "age" and cfg.data.features[0].max == 120.0
    assert cfg.tune.space == {"lr": ParamSpace(type="loguniform", low=0.0001, high=0.1)}


def test_empty_file_gives_defaults(write_yaml):
    assert load_config(write_yaml("# nothing set\n")) == Config()


def test_precedence_default():
    assert load_config().train.epochs == 5


def test_precedence_file_beats_default(write_yaml):
    assert load_config(write_yaml("train: {epochs: 3}\n")).train.epochs == 3


def test_precedence_override_beats_file(write_yaml):
    path = write_yaml("train: {epochs: 3, batch_size: 32}\n")
    cfg = load_config(path, ["train.epochs=7"])
    assert cfg.train.epochs == 7
    assert cfg.train.batch_size == 32  # the file's other keys survive the override


def test_later_override_wins():
    assert load_config(overrides=["train.epochs=2", "train.epochs=4"]).train.epochs == 4


def test_printed_yaml_loads_back_to_the_same_config(write_yaml):
    cfg = load_config(
        overrides=[
            "tune.space.lr.type=choice",
            "tune.space.lr.values=[0.1, 0.01]",
            "spark.conf.spark.sql.shuffle.partitions=4",
        ]
    )
    assert load_config(write_yaml(cfg.to_yaml())) == cfg


@pytest.mark.parametrize("path", sorted(CONF_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    assert isinstance(load_config(path), Config)


def test_quickstart_config():
    cfg = load_config(CONF_DIR / "quickstart.yaml")
    assert (cfg.spark.master, cfg.data.source, cfg.train.model, cfg.train.num_proc) == ("local[2]", "digits", "cnn", 2)


# --- dotted overrides and value parsing ---------------------------------------------------------


def test_spark_conf_override_keeps_the_dotted_spark_key():
    cfg = load_config(overrides=["spark.conf.spark.sql.shuffle.partitions=4", "spark.conf.spark.ui.enabled=true"])
    assert cfg.spark.conf == {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "true"}


def test_override_values_are_parsed_as_yaml():
    cfg = load_config(
        overrides=[
            "data.image_size=[16, 12]",
            "train.shuffle=false",
            "train.lr=0.05",
            "train.momentum=1",
            "train.model_args.hidden=[64, 32]",
            "train.model_args.dropout=0.1",
            "spark.gpu_discovery_script=null",
            "score.input=",
            "train.model=pkg.models:build",
        ]
    )
    assert cfg.data.image_size == [16, 12]
    assert cfg.train.shuffle is False
    assert cfg.train.lr == 0.05
    assert cfg.train.momentum == 1.0 and isinstance(cfg.train.momentum, float)
    assert cfg.train.model_args == {"hidden": [64, 32], "dropout": 0.1}
    assert cfg.spark.gpu_discovery_script is None
    assert cfg.score.input == ""
    assert cfg.train.model == "pkg.models:build"


def test_override_of_a_nested_section():
    cfg = load_config(
        overrides=[
            "data.split.train=0.6",
            "data.split.validation=0.2",
            "data.split.test=0.2",
            "train.early_stopping.patience=2",
        ]
    )
    assert (cfg.data.split.train, cfg.data.split.validation, cfg.data.split.test) == (0.6, 0.2, 0.2)
    assert cfg.train.early_stopping.patience == 2


def test_override_of_a_search_space_entry_field(write_yaml):
    path = write_yaml("tune:\n  space:\n    lr: {type: uniform, low: 0.001, high: 0.1}\n")
    cfg = load_config(
        path, ["tune.space.lr.type=loguniform", "tune.space.wd.type=choice", "tune.space.wd.values=[0, 0.01]"]
    )
    assert cfg.tune.space == {
        "lr": ParamSpace(type="loguniform", low=0.001, high=0.1),
        "wd": ParamSpace(type="choice", values=[0, 0.01]),
    }


# --- validation errors ---------------------------------------------------------------------------


def test_unknown_key_suggests_the_close_one():
    assert config_error("train.epoch=3") == (
        f"unknown key 'train.epoch': did you mean 'epochs'? valid keys here are {TRAIN_KEYS}"
    )


def test_unknown_key_without_a_close_match():
    assert config_error("train.zzz=3") == f"unknown key 'train.zzz': valid keys here are {TRAIN_KEYS}"


def test_unknown_section(write_yaml):
    assert config_error("trian.epochs=3") == (
        f"unknown key 'trian': did you mean 'train'? valid keys here are {SECTIONS}"
    )
    assert config_error(path=write_yaml("models: {}\n")) == f"unknown key 'models': valid keys here are {SECTIONS}"


def test_unknown_key_inside_a_search_space_entry():
    assert config_error("tune.space.lr.hi=1") == (
        "unknown key 'tune.space.lr.hi': did you mean 'high'? valid keys here are type, low, high, values, grid"
    )


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.epochs=three", "train.epochs: expected an integer, got 'three'"),
        ("train.epochs=2.5", "train.epochs: expected an integer, got 2.5"),
        ("train.epochs=true", "train.epochs: expected an integer, got True"),
        ("train.lr=fast", "train.lr: expected a number, got 'fast'"),
        ("train.lr=false", "train.lr: expected a number, got False"),
        ("train.shuffle=maybe", "train.shuffle: expected true or false, got 'maybe'"),
        ("train.shuffle=1", "train.shuffle: expected true or false, got 1"),
        ("train.model=3", "train.model: expected a string, got 3 (quote it in YAML)"),
        ("data.image_size=8", "data.image_size: expected a list, got 8"),
        ("data.image_size=[a, 8]", "data.image_size[0]: expected an integer, got 'a'"),
        ("spark.conf=4", "spark.conf: expected a mapping, got 4"),
    ],
)
def test_wrong_type(override, message):
    assert config_error(override) == message


def test_section_that_is_not_a_mapping(write_yaml):
    path = write_yaml("train: 5\n")
    assert config_error(path=path) == "train: expected a mapping of keys, got 5"
    assert config_error("train.epochs=3", path=path) == "override 'train.epochs=3': train is not a section"


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.epochs=0", "train.epochs: 0 is below the minimum 1; use a value >= 1"),
        ("train.lr=-0.1", "train.lr: -0.1 is below the minimum 0.0; use a value >= 0.0"),
        ("spark.gpus_per_executor=0", "spark.gpus_per_executor: 0 is below the minimum 1; use a value >= 1"),
    ],
)
def test_below_minimum(override, message):
    assert config_error(override) == message


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.max_reject_fraction=1.5", "data.max_reject_fraction: 1.5 is above the maximum 1.0; use a value <= 1.0"),
        ("data.split.train=2", "data.split.train: 2.0 is above the maximum 1.0; use a value <= 1.0"),
    ],
)
def test_above_maximum(override, message):
    assert config_error(override) == message


def test_choice_not_allowed_suggests_the_close_one():
    assert config_error("train.optimizer=adamm") == (
        "train.optimizer: 'adamm' is not allowed (did you mean 'adam'?); choose one of 'sgd', 'adam', 'adamw'"
    )


def test_choice_not_allowed_without_a_close_match():
    assert config_error("data.source=kafka") == (
        "data.source: 'kafka' is not allowed; choose one of 'csv', 'json', 'parquet', 'images', 'digits', 'synthetic'"
    )


def test_split_fractions_must_add_up_to_one():
    assert config_error("data.split.train=0.5") == (
        "data.split: train + validation + test = 0.5 + 0.1 + 0.1 = 0.7; the fractions must add up to 1"
    )


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["tune.space.lr.type=choice"], "tune.space.lr: a choice parameter needs a non-empty 'values' list"),
        (
            ["tune.space.lr.type=choice", "tune.space.lr.values=[]"],
            "tune.space.lr: a choice parameter needs a non-empty 'values' list",
        ),
        (
            ["tune.space.lr.low=1", "tune.space.lr.high=0.5"],
            "tune.space.lr: type 'uniform' needs low < high, got low=1.0 high=0.5",
        ),
        (
            ["tune.space.n.type=int", "tune.space.n.low=2"],
            "tune.space.n: type 'int' needs low < high, got low=2.0 high=None",
        ),
        (
            ["tune.space.lr.type=loguniform", "tune.space.lr.low=0", "tune.space.lr.high=1"],
            "tune.space.lr: a loguniform parameter needs low > 0, got 0.0",
        ),
        (
            ["tune.space.lr.type=gaussian"],
            "tune.space.lr.type: 'gaussian' is not allowed; choose one of 'uniform', 'loguniform', 'int', 'choice'",
        ),
        (["tune.space.lr=0.1"], "tune.space.lr: expected a mapping of keys, got 0.1"),
    ],
)
def test_search_space_errors(overrides, message):
    assert config_error(*overrides) == message


@pytest.mark.parametrize("source", ["csv", "json", "parquet", "images"])
def test_file_sources_need_a_path(source):
    assert config_error(f"data.source={source}") == (
        f"data.path: source {source!r} reads files, so data.path must be set "
        "(any URL Spark reads, e.g. file:///data/train.csv)"
    )


def test_file_source_with_a_path():
    assert load_config(overrides=["data.source=csv", "data.path=file:///data/x.csv"]).data.path == "file:///data/x.csv"


@pytest.mark.parametrize("value", ["[8]", "[8, 8, 3]", "[0, 8]", "[]"])
def test_bad_image_size(value):
    assert config_error(f"data.image_size={value}") == (
        f"data.image_size: expected [height, width] of positive integers, got {value}"
    )


# --- files ------------------------------------------------------------------------------------------


def test_missing_config_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    assert config_error(path=missing) == (
        f"config file {str(missing)!r} does not exist; pass a YAML file such as conf/quickstart.yaml"
    )


def test_invalid_yaml(write_yaml):
    path = write_yaml("train:\n  epochs: [1, 2\n  lr: 3\n")
    assert config_error(path=path) == (
        f"config file {str(path)!r} is not valid YAML: expected ',' or ']', but got ':' at line 3, column 5"
    )


@pytest.mark.parametrize("text, kind", [("- train\n- data\n", "list"), ("just words\n", "str"), ("3\n", "int")])
def test_yaml_that_is_not_a_mapping(write_yaml, text, kind):
    path = write_yaml(text)
    assert config_error(path=path) == f"config file {str(path)!r} must hold a mapping of sections, got {kind}"


def test_config_files_are_never_executed(write_yaml, tmp_path):
    marker = tmp_path / "executed"
    path = write_yaml(f"train: !!python/object/apply:os.system ['touch {marker}']\n")
    assert config_error(path=path) == (
        f"config file {str(path)!r} uses a YAML tag that builds objects (could not determine a constructor for "
        "the tag 'tag:yaml.org,2002:python/object/apply:os.system' at line 1, column 8); "
        "config files hold plain values only"
    )
    assert not marker.exists()


@pytest.mark.parametrize("override", ["train.epochs", "=3", " =3"])
def test_malformed_override(override):
    assert config_error(override) == (
        f"override {override!r} is not of the form section.key=value (e.g. train.epochs=3)"
    )


def test_override_value_that_is_not_yaml():
    assert config_error("train.model=[cnn") == (
        "override 'train.model=[cnn': the value is not valid YAML (expected ',' or ']', but got '<stream end>' "
        "at line 1, column 5); quote it to pass a string"
    )


# --- ${ENV} interpolation -----------------------------------------------------------------------


def test_env_interpolation(write_yaml, monkeypatch):
    monkeypatch.setenv("SPARKML_PAR_TEST_DATA", "/mnt/data")
    monkeypatch.setenv("SPARKML_PAR_TEST_MASTER", "spark://head:7077")
    path = write_yaml("""
spark: {master: "${SPARKML_PAR_TEST_MASTER}"}
data: {source: csv, path: "file://${SPARKML_PAR_TEST_DATA}/train.csv"}
""")
    cfg = load_config(path)
    assert cfg.spark.master == "spark://head:7077"
    assert cfg.data.path == "file:///mnt/data/train.csv"


def test_env_default_syntax(write_yaml, monkeypatch):
    monkeypatch.delenv("SPARKML_PAR_TEST_UNSET", raising=False)
    monkeypatch.setenv("SPARKML_PAR_TEST_OUT", "/runs/7")
    path = write_yaml(
        'train: {output: "${SPARKML_PAR_TEST_OUT:-runs/model}", '
        'model: "${SPARKML_PAR_TEST_UNSET:-mlp}-${SPARKML_PAR_TEST_UNSET:-}x"}\n'
    )
    cfg = load_config(path)
    assert cfg.train.output == "/runs/7"  # a set variable wins over its default
    assert cfg.train.model == "mlp-x"


def test_env_in_number_and_boolean_fields(write_yaml, monkeypatch):
    monkeypatch.setenv("SPARKML_PAR_TEST_PROCS", "4")
    monkeypatch.setenv("SPARKML_PAR_TEST_LR", "0.5")
    monkeypatch.setenv("SPARKML_PAR_TEST_APP", "123")
    monkeypatch.delenv("SPARKML_PAR_TEST_OFF", raising=False)
    path = write_yaml("""
train: {num_proc: "${SPARKML_PAR_TEST_PROCS}", lr: "${SPARKML_PAR_TEST_LR}", shuffle: "${SPARKML_PAR_TEST_OFF:-false}"}
spark: {app_name: "${SPARKML_PAR_TEST_APP}", conf: {spark.cores.max: "${SPARKML_PAR_TEST_PROCS}"}}
""")
    cfg = load_config(path)
    assert (cfg.train.num_proc, cfg.train.lr, cfg.train.shuffle) == (4, 0.5, False)
    assert cfg.spark.app_name == "123"  # a string field keeps the text
    assert cfg.spark.conf == {"spark.cores.max": "4"}
    assert "app_name: '123'" in cfg.to_yaml()


def test_env_value_of_the_wrong_type(write_yaml, monkeypatch):
    monkeypatch.setenv("SPARKML_PAR_TEST_PROCS", "four")
    path = write_yaml('train: {num_proc: "${SPARKML_PAR_TEST_PROCS}"}\n')
    assert config_error(path=path) == "train.num_proc: expected an integer, got 'four'"


def test_env_in_an_override(monkeypatch):
    monkeypatch.setenv("SPARKML_PAR_TEST_DATA", "/mnt/data")
    assert load_config(overrides=["data.output=${SPARKML_PAR_TEST_DATA}/ds"]).data.output == "/mnt/data/ds"


def test_unset_env_variable(write_yaml, monkeypatch):
    monkeypatch.delenv("SPARKML_PAR_TEST_UNSET", raising=False)
    path = write_yaml('data: {source: csv, path: "${SPARKML_PAR_TEST_UNSET}/x.csv"}\n')
    assert config_error(path=path) == (
        "data.path: environment variable 'SPARKML_PAR_TEST_UNSET' is not set; "
        "export it or write ${SPARKML_PAR_TEST_UNSET:-default}"
    )


# --- the reference --------------------------------------------------------------------------------


def test_describe_lists_every_leaf_key_with_default_and_doc():
    rows = {key: (default, doc) for key, default, doc in describe()}
    assert rows["train.epochs"] == ("5", "Passes over the train split.")
    assert rows["data.split.train"] == ("0.8", "Fraction of rows in the train split.")
    assert rows["spark.master"][0] == "'local[2]'"
    assert "data.split" not in rows and "train" not in rows  # sections expand into their keys
    assert all(doc for default, doc in rows.values())
