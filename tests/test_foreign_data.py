"""The pipeline on data it has never seen: scikit-learn's real datasets in the formats and with the column
names a user brings them, through prepare -> train -> score, each against a scikit-learn baseline.

Each scenario prepares its input, trains with 2 Horovod ranks in a barrier stage, scores the test split
and the raw input file itself, and asserts the dataset's row invariants, the id column in the
predictions, and a test metric within a stated margin of LogisticRegression / LinearRegression fitted
on the same featurized train split.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import foreign_data
import numpy as np
import pyarrow.parquet as pq
import pytest
from run_settings import small_mlp

from data_prep.job import prepare
from sparkml_par.config import load_config
from sparkml_par.infer.score import score_job
from sparkml_par.train.job import train

pytestmark = pytest.mark.stack


@dataclass(frozen=True)
class Scenario:
    name: str
    dataset: str  # a foreign_data.frame name, or "digit_images"
    fmt: str  # csv, json, parquet or images
    label: str
    key: str | None  # data.split.key and score.id_column
    metric: str  # accuracy (higher is better) or mse (lower is better)
    margin: float  # accuracy: at most this far below the baseline; mse: at most (1 + margin) times it
    task: str = "classification"
    region: bool = False  # add a categorical column with missing values
    bad_lines: tuple[str, ...] = ()  # CSV lines appended to the file, with the reason each must be quarantined for
    reasons: tuple[tuple[str, int], ...] = ()
    overrides: tuple[str, ...] = field(default=())


SCENARIOS = [
    Scenario(
        "breast-cancer-csv",
        "breast_cancer",
        "csv",
        label="diagnosis",
        key="patient id",
        metric="accuracy",
        margin=0.05,
        overrides=("train.epochs=15",),
        # two rows cut short, text in a number column, a missing value (n/a, as pandas reads it), one row too long
        bad_lines=(
            "20001,13.5",
            "20002",
            "20003,abc" + ",1.0" * 29 + ",1",
            "20004,1.0,n/a" + ",1.0" * 28 + ",0",
            "20005" + ",1.0" * 30 + ",1,9",
        ),
        reasons=(("malformed_row", 3), ("null:mean texture", 1), ("unparseable:mean radius", 1)),
    ),
    Scenario(
        "wine-json",
        "wine",
        "json",
        label="cultivar",
        key="sample_id",
        metric="accuracy",
        margin=0.1,
        overrides=("train.epochs=25",),
    ),
    Scenario(
        "iris-parquet-text-labels",
        "iris",
        "parquet",
        label="species",
        key="flower",
        metric="accuracy",
        margin=0.15,
        overrides=("train.epochs=40",),
    ),
    Scenario(
        "diabetes-csv-regression",
        "diabetes",
        "csv",
        label="progression",
        key=None,
        metric="mse",
        margin=0.3,
        task="regression",
        overrides=("train.epochs=30",),
    ),
    Scenario(
        "wine-csv-missing-categories",
        "wine",
        "csv",
        label="cultivar",
        key="sample_id",
        metric="accuracy",
        margin=0.1,
        region=True,
        overrides=("data.featurize.impute=median", "train.epochs=25"),
        # imputation fills what is missing, never what is unreadable
        bad_lines=("w9999,abc" + ",1.0" * 12 + ",1,north",),
        reasons=(("unparseable:alcohol", 1),),
    ),
    Scenario(
        "digit-pngs",
        "digit_images",
        "images",
        label="digit",
        key=None,
        metric="accuracy",
        margin=0.1,
        overrides=("train.model=cnn", "train.model_args={}", "train.epochs=8", "data.image_size=[8, 8]"),
    ),
]


def _arrange(scenario: Scenario, root: Path) -> tuple[Path, int]:
    """The raw input under root/raw, and how many rows (images) it holds."""
    if scenario.fmt == "images":
        foreign_data.write_digit_images(root / "raw", per_class=40)
        return root / "raw", 400
    df = foreign_data.frame(scenario.dataset)
    if scenario.region:
        df = foreign_data.with_region(df)
    path = foreign_data.write(df, root / "raw", scenario.fmt)
    if scenario.bad_lines:
        with path.open("a") as file:
            file.write("\n".join(scenario.bad_lines) + "\n")
    return path, len(df) + len(scenario.bad_lines)


def _config(scenario: Scenario, root: Path, path: Path, *extra: str):
    key = [f"data.split.key={scenario.key}", f"score.id_column={scenario.key}"] if scenario.key else []
    return load_config(
        None,
        [
            f"data.source={scenario.fmt}",
            f"data.path={path}",
            f"data.label={scenario.label}",
            f"data.task={scenario.task}",
            "data.max_shards=2",
            f"data.output={root}/dataset",
            *small_mlp(),
            f"train.output={root}/train",
            f"score.output={root}/predictions",
            *key,
            *scenario.overrides,
            *extra,
        ],
    )


def _split(dataset: str, name: str, label: str) -> tuple[np.ndarray, np.ndarray]:
    table = pq.read_table(f"{dataset.removeprefix('file://')}/{name}", columns=["features", label])
    return np.stack(table.column("features").to_numpy(zero_copy_only=False)), table.column(label).to_numpy()


def _baseline(scenario: Scenario, dataset: str) -> float:
    """The scikit-learn model of the task fitted on the same featurized train split, scored on the test split."""
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.metrics import accuracy_score, mean_squared_error

    x_train, y_train = _split(dataset, "train", scenario.label)
    x_test, y_test = _split(dataset, "test", scenario.label)
    if scenario.task == "regression":
        return mean_squared_error(y_test, LinearRegression().fit(x_train, y_train).predict(x_test))
    return accuracy_score(y_test, LogisticRegression(max_iter=2000).fit(x_train, y_train).predict(x_test))


def _assert_row_invariants(spark, manifest: dict, dataset: str) -> None:
    quarantine = manifest["quarantine"]
    assert manifest["rows_in"] == manifest["rows_clean"] + quarantine["rows"]
    assert sum(s["rows"] for s in manifest["splits"].values()) == manifest["rows_clean"]
    assert sum(quarantine["reasons"].values()) == quarantine["rows"]
    held = spark.read.parquet(f"{dataset}/{quarantine['path']}")
    assert {r[0]: r[1] for r in held.groupBy("_reject_reason").count().collect()} == quarantine["reasons"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_foreign_dataset_end_to_end(spark, tmp_path, scenario):
    path, rows_in = _arrange(scenario, tmp_path)
    cfg = _config(scenario, tmp_path, path)

    prepared = prepare(spark, cfg.data)
    m = prepared.manifest
    assert m["rows_in"] == rows_in and m["label_column"] == scenario.label
    assert m["quarantine"]["reasons"] == dict(scenario.reasons)
    _assert_row_invariants(spark, m, prepared.output)
    if scenario.dataset == "iris":
        assert m["classes"] == ["setosa", "versicolor", "virginica"]
    if scenario.fmt == "images":
        assert m["classes"][:3] == ["eight", "five", "four"] and m["feature_shape"] == [1, 8, 8]

    trained = train(spark, cfg)
    assert trained.epochs_run >= 1

    scored = score_job(spark, cfg)
    test_rows = m["splits"]["test"]["rows"]
    assert scored.rows == test_rows and scored.rejected is None
    ours = scored.metrics[scenario.metric]
    baseline = _baseline(scenario, prepared.output)
    print(f"\n{scenario.name}: {scenario.metric} ours {ours:.4f} baseline {baseline:.4f} margin {scenario.margin}")
    if scenario.metric == "accuracy":
        assert ours >= baseline - scenario.margin
    else:
        assert ours <= baseline * (1 + scenario.margin)

    predictions = pq.read_table(tmp_path / "predictions").to_pandas()
    if scenario.key:
        assert predictions[scenario.key].is_unique and len(predictions) == test_rows
    if m.get("classes"):
        names = np.asarray(m["classes"])
        assert (predictions["predicted_label"] == names[predictions["prediction"]]).all()

    # The raw input itself, as new rows: read, checked and featurized by the dataset's rules.
    raw = score_job(
        spark, _config(scenario, tmp_path, path, f"score.input={path}", f"score.output={tmp_path}/raw_predictions")
    )
    assert raw.rejected["rows_in"] == rows_in and raw.rows + raw.rejected["rows"] == rows_in
    assert raw.rejected["reasons"] == m["quarantine"]["reasons"]
    held = spark.read.parquet(f"{tmp_path}/raw_predictions/_quarantine") if raw.rejected["rows"] else None
    assert (held.count() if held else 0) == raw.rejected["rows"]
    raw_predictions = pq.read_table(tmp_path / "raw_predictions").to_pandas()
    assert raw_predictions[scenario.key or "_row_id"].is_unique and len(raw_predictions) == raw.rows
    assert raw.metrics["rows_evaluated"] == raw.rows
    written = json.loads((tmp_path / "raw_predictions" / "_metrics.json").read_text())
    assert written["rejected"]["rows"] == raw.rejected["rows"]
    if scenario.metric == "accuracy":
        assert raw.metrics["accuracy"] >= baseline - 2 * scenario.margin


def test_the_same_rows_split_alike_as_csv_json_lines_and_parquet(spark, tmp_path):
    iris = foreign_data.frame("iris")
    splits = {}
    for fmt in ("csv", "json", "parquet"):
        path = foreign_data.write(iris, tmp_path / fmt, fmt)
        cfg = load_config(
            None,
            [
                f"data.source={fmt}",
                f"data.path={path}",
                "data.label=species",
                "data.max_shards=1",
                f"data.output={tmp_path}/{fmt}-dataset",
            ],
        )
        dataset = prepare(spark, cfg.data).output
        splits[fmt] = {
            name: sorted(pq.read_table(f"{dataset.removeprefix('file://')}/{name}").column("_row_id").to_pylist())
            for name in ("train", "validation", "test")
        }
    assert splits["csv"] == splits["json"] == splits["parquet"]
    assert sum(len(ids) for ids in splits["csv"].values()) == 150
