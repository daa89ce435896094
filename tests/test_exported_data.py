"""Tabular data as users export it: R's NA, free text with thousands of values, timestamps, dates, booleans and
id columns, each through prepare -> train -> score against a scikit-learn baseline on the same split.

The rows are scikit-learn's breast cancer data (569 real rows), written as an R export, JSON lines or a CSV of
another locale's dates, with columns added the way such exports carry them. Each scenario asserts the rule it
exercises on the dataset's manifest and fitted pipeline, then the model's test accuracy against
LogisticRegression fitted on the same featurized train split.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import foreign_data
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from run_settings import small_mlp

from data_prep import featurize
from data_prep.job import prepare, summary
from sparkml_par.config import load_config
from sparkml_par.contract import quoted
from sparkml_par.infer.score import score_job
from sparkml_par.train.job import train

ROWS = 569
LABEL = "diagnosis"
# Every 50th row has no label, every 20th no `mean radius`, every 25th no clinic: as an R export writes them.
NA_LABEL = list(range(0, ROWS, 50))
NA_RADIUS = list(range(0, ROWS, 20))
NA_CLINIC = list(range(0, ROWS, 25))
REFERRERS = 400  # distinct referrers, about one in every 1.4 rows: free text, not a category
MAX_CATEGORIES = 20


def _exported(rows: int = ROWS) -> pd.DataFrame:
    """breast cancer with an id, a clinic (a category), a referrer (free text), a visit time, a birth date and a
    smoker flag; the label and the added columns depend on the row only."""
    df = foreign_data.frame("breast_cancer").head(rows).copy()
    i = np.arange(len(df))
    df["clinic"] = np.asarray(["north", "south", "east", "west"], dtype=object)[i % 4]
    df["referrer"] = [f"dr {(k * 7919) % REFERRERS:03d}" for k in i]
    df["visited"] = [f"2013-{1 + k % 12:02d}-{1 + k % 28:02d}T{k % 24:02d}:{k % 60:02d}:00Z" for k in i]
    df["born"] = [f"{1940 + k % 50}-{1 + k % 12:02d}-{1 + k % 28:02d}" for k in i]
    df["smoker"] = (i % 3 == 0).tolist()
    return df


def _with_r_missing(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df[LABEL] = df[LABEL].astype(object)
    df.loc[NA_LABEL, LABEL] = None
    df.loc[NA_RADIUS, "mean radius"] = None
    df.loc[NA_CLINIC, "clinic"] = None
    return df


@dataclass(frozen=True)
class Scenario:
    name: str
    fmt: str
    overrides: tuple[str, ...] = field(default=())
    margin: float = 0.05  # test accuracy at most this far below the baseline's


def _write(scenario: Scenario, root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if scenario.name == "r-export":
        path = root / "export.csv"
        _with_r_missing(_exported()).to_csv(path, index=False, na_rep="NA")  # R's write.csv writes NA
    elif scenario.name == "json-lines":
        path = root / "export.json"
        _exported().to_json(path, orient="records", lines=True)  # smoker as JSON booleans
    else:  # dates as a European spreadsheet writes them, declared with their format
        df = _exported()
        df["visited"] = [f"{t[8:10]}/{t[5:7]}/{t[0:4]} {t[11:16]}" for t in df["visited"]]
        df["smoker"] = np.where(df["smoker"], "yes", "no")
        path = root / "export.csv"
        df.to_csv(path, index=False)
    return path


SCENARIOS = [
    Scenario(
        "r-export",
        "csv",
        overrides=("data.featurize.impute=median", f"data.featurize.max_categories={MAX_CATEGORIES}"),
    ),
    Scenario("json-lines", "json", overrides=(f"data.featurize.max_categories={MAX_CATEGORIES}",)),
    Scenario(
        "declared-formats",
        "csv",
        overrides=(
            "data.split.key=patient id",
            "data.features=[{name: mean radius}, {name: mean texture}, {name: worst area}, "
            "{name: visited, type: timestamp, format: 'dd/MM/yyyy HH:mm'}, {name: born, type: date}, "
            "{name: smoker, type: bool}, {name: clinic, type: string}]",
        ),
        margin=0.08,
    ),
]


def _config(scenario: Scenario, root: Path, path: Path, *extra: str):
    return load_config(
        None,
        [
            f"data.source={scenario.fmt}",
            f"data.path={path}",
            f"data.label={LABEL}",
            "data.max_shards=2",
            f"data.output={root}/dataset",
            *small_mlp(),
            "train.epochs=15",
            f"train.output={root}/train",
            f"score.output={root}/predictions",
            *scenario.overrides,
            *extra,
        ],
    )


def _baseline(dataset: str) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score

    def split(name):
        table = pq.read_table(f"{dataset.removeprefix('file://')}/{name}", columns=["features", LABEL])
        return np.stack(table.column("features").to_numpy(zero_copy_only=False)), table.column(LABEL).to_numpy()

    (x_train, y_train), (x_test, y_test) = split("train"), split("test")
    return accuracy_score(y_test, LogisticRegression(max_iter=3000).fit(x_train, y_train).predict(x_test))


def _features_of(spark, manifest: dict, dataset: str, rows: list[dict]) -> np.ndarray:
    """Raw rows through the dataset's checks and fitted pipeline, as scoring reads them."""
    from data_prep.ingest import from_dataframe
    from data_prep.score_rows import score_rows

    scored = score_rows(spark, from_dataframe(spark.createDataFrame(pd.DataFrame(rows))), manifest, dataset)
    return np.stack([np.asarray(r["features"]) for r in scored.rows.select("features").collect()])


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_exported_table_end_to_end(spark, tmp_path, scenario, caplog):
    path = _write(scenario, tmp_path / "raw")
    cfg = _config(scenario, tmp_path, path)
    with caplog.at_level(logging.WARNING):
        prepared = prepare(spark, cfg.data)
    m, dataset = prepared.manifest, prepared.output
    types = m["raw_feature_types"]
    assert m["rows_in"] == ROWS == m["rows_clean"] + m["quarantine"]["rows"]

    if scenario.name == "r-export":
        # A missing label is its own reason; missing numbers and text are imputed, nothing else is rejected.
        assert m["quarantine"]["reasons"] == {f"null:{LABEL}": len(NA_LABEL)}
        profile = json.loads(Path(dataset.removeprefix("file://"), "profile.json").read_text())
        kept = set(range(ROWS)) - set(NA_LABEL)
        assert profile["columns"]["mean radius"]["nulls"] == len(kept & set(NA_RADIUS))
        assert profile["columns"]["clinic"]["nulls"] == 0  # read as the category <missing>
    if scenario.name in ("r-export", "json-lines"):
        # Inferred: the id is left out, the dates and the flag get their own types, free text is capped.
        assert "patient id" not in types and "patient id" in m["left_out_columns"]
        assert (types["visited"], types["born"], types["smoker"], types["clinic"]) == (
            "timestamp",
            "date",
            "bool",
            "string",
        )
        referrers = m["categories"]["referrer"]
        assert referrers["kept"] == MAX_CATEGORIES and referrers["distinct"] > 200
        assert any("'referrer'" in r.getMessage() and "<other>" in r.getMessage() for r in caplog.records)
        # 30 numbers, the flag, 9 date parts, the clinics and the kept referrers: not 400 referrer columns.
        assert m["feature_shape"][0] <= 30 + 1 + 9 + 6 + MAX_CATEGORIES + 2
        text = summary(prepared)
        assert f"text column   referrer: {referrers['distinct']} distinct in train, {MAX_CATEGORIES} kept" in text
        assert "left out      patient id: about" in text
        # A referrer never seen and a rare one both read as <other>: the same features.
        row = _exported(1).drop(columns=[LABEL]).to_dict("records")[0]
        counts = _exported()["referrer"].value_counts()
        rare = counts[counts == counts.min()].index.max()  # seen once, after every tie in the kept order
        features = _features_of(spark, m, dataset, [dict(row, referrer="dr never seen"), dict(row, referrer=rare)])
        np.testing.assert_array_equal(features[0], features[1])
    else:
        assert types["visited"] == "timestamp" and types["smoker"] == "bool" and not m["quarantine"]["reasons"]
    # The parts a timestamp and a date become, by the pipeline of the dataset's recipe (its first stage), on a
    # row of every feature column.
    specs = _specs(m)
    sample = {"timestamp": "TIMESTAMP'2013-03-03 02:02:00'", "date": "TIMESTAMP'1942-03-03 00:00:00'", "string": "'x'"}
    values = [f"{sample.get(s.type, 'CAST(0 AS double)')} AS {quoted(s.name)}" for s in specs]
    row = spark.range(1).selectExpr(*values)
    first = featurize.build_pipeline(row, specs, m["feature_pipeline"]).stages[0]
    derived = first.transform(row).first().asDict()
    plain = featurize.plain_names([s.name for s in specs])
    # year, month, day, day of week (Sunday 1), hour; 1942-03-03 was a Tuesday.
    parts = {"visited": featurize.DATETIME_PARTS["timestamp"], "born": featurize.DATETIME_PARTS["date"]}
    expected = {"visited": [2013, 3, 3, 1, 2], "born": [1942, 3, 3, 3]}
    assert {name: [derived[f"{plain[name]}__{p}"] for p in parts[name]] for name in parts} == expected
    # The features prepare's write tasks computed from Arrow batches are those scoring's Spark ML pipeline
    # computes from the same raw rows, bit for bit.
    _assert_scoring_reproduces_the_written_features(spark, m, dataset, path, scenario.fmt)

    trained = train(spark, cfg)
    assert trained.epochs_run >= 1
    scored = score_job(spark, cfg)
    assert scored.rows == m["splits"]["test"]["rows"]
    baseline = _baseline(dataset)
    print(f"\n{scenario.name}: accuracy ours {scored.metrics['accuracy']:.4f} baseline {baseline:.4f}")
    assert scored.metrics["accuracy"] >= baseline - scenario.margin

    # The export itself, scored as new rows: the same tokens, types and categories from the manifest.
    raw = score_job(
        spark, _config(scenario, tmp_path, path, f"score.input={path}", f"score.output={tmp_path}/raw_predictions")
    )
    assert raw.rows + raw.rejected["rows"] == ROWS
    assert raw.rejected["reasons"] == {}  # a missing label is scored: only prepare needs labels


def _assert_scoring_reproduces_the_written_features(spark, m: dict, dataset: str, path: Path, fmt: str) -> None:
    from data_prep.score_rows import read_raw, score_rows

    scored = score_rows(spark, read_raw(spark, str(path), fmt, m), m, dataset).rows.select("_row_id", "features")
    by_id = {r["_row_id"]: r["features"] for r in scored.collect()}  # collected: a join would plan the pipeline twice
    written = spark.read.parquet(f"{dataset}/test").collect()
    assert len(written) == m["splits"]["test"]["rows"] and all(r["_row_id"] in by_id for r in written)
    np.testing.assert_array_equal(
        np.array([r["features"] for r in written]), np.array([by_id[r["_row_id"]] for r in written])
    )


def _specs(manifest: dict):
    from data_prep.score_rows import rules

    return rules(manifest).features
