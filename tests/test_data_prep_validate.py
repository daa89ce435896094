"""Validation and quarantine on real files, and every bad-input error with its message."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from data_prep.job import prepare
from sparkml_par.config import ColumnSpec, DataConfig, FeaturizeConfig, SplitConfig
from sparkml_par.errors import SparkmlParError

HEADER = "sepal_length,sepal_width,color,species"
GOOD = [
    f"{4 + (i % 10) * 0.3:.1f},{2 + (i % 7) * 0.2:.1f},{['red', 'blue', 'green'][i % 3]},{i % 3}" for i in range(40)
]
# raw line -> the one reason it must be quarantined for
BAD = {
    "abc,3.0,red,1": "unparseable:sepal_length",
    "5.0,3.0,red,": "null:species",
    "5.0,NaN,red,1": "null:sepal_width",  # NaN reads as missing (data.null_values), and shows so in quarantine
    "5.0,Infinity,blue,2": "nan_or_inf:sepal_width",
    "5.0,3.0,purple,1": "unknown_category:color",
    "99.0,3.0,red,1": "out_of_range:sepal_length",
    "5.0,3.0,red,1.5": "not_integer:species",
    "5.0,3.0,red,-1": "out_of_range:species",
    "5.0,3.0,red,1,extra": "malformed_row",
    "5.0,3.0": "malformed_row",
}
FEATURES = [
    ColumnSpec(name="sepal_length", type="float", min=0.0, max=10.0),
    ColumnSpec(name="sepal_width", type="float"),
    ColumnSpec(name="color", type="string", categories=["red", "blue", "green"]),
]


def _csv(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _config(tmp_path, path, **overrides) -> DataConfig:
    settings = dict(
        source="csv",
        path=path,
        label="species",
        features=list(FEATURES),
        max_shards=2,
        max_reject_fraction=0.5,
        output=str(tmp_path / "dataset"),
        split=SplitConfig(seed=1),
    )
    settings.update(overrides)
    return DataConfig(**settings)


def test_known_bad_rows_are_exactly_the_quarantine_with_their_reasons(spark, tmp_path):
    lines = [HEADER] + GOOD[:20] + list(BAD) + GOOD[20:]
    cfg = _config(tmp_path, _csv(tmp_path / "iris.csv", lines))
    result = prepare(spark, cfg)

    quarantine = spark.read.parquet(f"{result.output}/quarantine")
    assert set(quarantine.columns) >= {
        "sepal_length",
        "sepal_width",
        "color",
        "species",
        "_reject_reason",
        "_raw_record",
    }
    got = {}
    for row in quarantine.collect():
        raw = row["_raw_record"] or ",".join(
            "" if row[c] is None else row[c] for c in ("sepal_length", "sepal_width", "color", "species")
        )
        got[raw.rstrip(",") if row["_raw_record"] is None else raw] = row["_reject_reason"]
    expected = {line.replace("NaN", "").rstrip(","): reason for line, reason in BAD.items()}
    assert got == expected

    m = result.manifest
    reasons = {}
    for reason in BAD.values():
        reasons[reason] = reasons.get(reason, 0) + 1
    assert m["quarantine"] == {"path": "quarantine", "rows": len(BAD), "reasons": dict(sorted(reasons.items()))}
    assert m["rows_in"] == len(GOOD) + len(BAD) and m["rows_clean"] == len(GOOD)
    assert sum(s["rows"] for s in m["splits"].values()) == len(GOOD)
    assert m["num_classes"] == 3 and m["raw_feature_columns"] == ["sepal_length", "sepal_width", "color"]


def test_typed_parquet_columns_are_checked_for_what_their_types_can_hold(spark, tmp_path):
    """Parquet columns arrive typed, so each gets the checks its type can fail: an integral column only
    null, a fractional one NaN or infinity, a fractional classification label not integer."""
    good = [(float(i), i % 5, float(i % 3)) for i in range(60)]
    bad = [(float("nan"), 1, 1.0), (float("-inf"), 2, 2.0), (1.0, None, 0.0), (2.0, 3, 1.5), (3.0, 4, None)]
    spark.createDataFrame(good + bad, "x double, n int, label double").write.parquet(str(tmp_path / "in"))
    cfg = DataConfig(source="parquet", path=str(tmp_path / "in"), output=str(tmp_path / "ds"), max_shards=2)
    m = prepare(spark, cfg).manifest
    assert m["quarantine"]["reasons"] == {"nan_or_inf:x": 2, "not_integer:label": 1, "null:label": 1, "null:n": 1}
    assert m["rows_clean"] == 60 and m["raw_feature_columns"] == ["x", "n"] and m["num_classes"] == 3


def test_the_rejected_rows_schema_is_theirs_before_they_are_planned(spark, tmp_path):
    """An input without rejected rows gets an empty quarantine of `rejected_schema`, which prepare names
    without planning the rejected rows: it is the schema they have where there are some."""
    from data_prep.ingest import ingest
    from data_prep.validate import validate

    spark.createDataFrame([(1.0, 1, 0), (float("nan"), None, 1)], "x double, n int, label long").write.parquet(
        str(tmp_path / "in")
    )
    typed = DataConfig(source="parquet", path=str(tmp_path / "in"), output=str(tmp_path / "ds"))
    text = _config(tmp_path, _csv(tmp_path / "iris.csv", [HEADER] + GOOD + list(BAD)))
    for cfg in (typed, text):
        v = validate(ingest(spark, cfg), cfg)
        try:
            assert v.rows_in > v.rows_clean
            assert v.rejected_schema == v.rejected.schema
        finally:
            v.release()


def test_an_empty_text_feature_in_parquet_is_missing_as_in_csv(spark, tmp_path):
    """Parquet keeps an empty text as a value; it reads as missing, as a CSV's empty field does: the category
    <missing> with imputation, `null:<col>` without (Spark ML cannot name a category by an empty text)."""
    rows = [(["red", "blue", ""][i % 3], float(i), i % 2) for i in range(300)]
    spark.createDataFrame(rows, "color string, x double, label long").write.parquet(str(tmp_path / "in"))
    features = [ColumnSpec(name="color", type="string"), ColumnSpec(name="x", type="float")]
    base = dict(source="parquet", path=str(tmp_path / "in"), features=features, max_shards=2, max_reject_fraction=0.5)
    imputed = DataConfig(**base, output=str(tmp_path / "imputed"), featurize=FeaturizeConfig(impute="median"))
    m = prepare(spark, imputed).manifest
    assert m["rows_clean"] == 300
    assert sorted(m["feature_pipeline"]["categories"]["color"]) == ["<missing>", "blue", "red"]
    strict = DataConfig(**base, output=str(tmp_path / "strict"), featurize=FeaturizeConfig(impute="none"))
    m = prepare(spark, strict).manifest
    assert m["quarantine"]["reasons"] == {"null:color": 100} and m["rows_clean"] == 200


def test_too_many_bad_rows_fail_the_job_and_keep_the_rejects(spark, tmp_path):
    lines = [HEADER] + GOOD[:10] + list(BAD)
    cfg = _config(tmp_path, _csv(tmp_path / "bad.csv", lines), max_reject_fraction=0.1)
    with pytest.raises(
        SparkmlParError,
        match=r"10 of 20 rows \(50.0%\) failed validation, more than "
        r"data.max_reject_fraction=0.1 allows \(malformed_row: 2, ",
    ):
        prepare(spark, cfg)
    assert not (tmp_path / "dataset").exists()
    assert spark.read.parquet(str(tmp_path / "dataset.rejected")).count() == len(BAD)
    assert not list(tmp_path.glob("dataset.tmp-*"))


def test_missing_path(spark, tmp_path):
    cfg = _config(tmp_path, str(tmp_path / "nope.csv"))
    with pytest.raises(SparkmlParError, match=r"data.path '.*nope.csv' does not exist .*check the path"):
        prepare(spark, cfg)


def test_empty_file(spark, tmp_path):
    (tmp_path / "empty.csv").write_text("")
    cfg = _config(tmp_path, str(tmp_path / "empty.csv"))
    with pytest.raises(SparkmlParError, match=r"data.path '.*empty.csv' has no columns \(is the csv input empty\?\)"):
        prepare(spark, cfg)


def test_header_only_file_has_no_rows(spark, tmp_path):
    cfg = _config(tmp_path, _csv(tmp_path / "header.csv", [HEADER]))
    with pytest.raises(SparkmlParError, match=r"data.path '.*header.csv' has no rows \(csv input is empty\)"):
        prepare(spark, cfg)


def test_empty_directory(spark, tmp_path):
    (tmp_path / "in").mkdir()
    cfg = _config(tmp_path, str(tmp_path / "in"))
    with pytest.raises(SparkmlParError, match=r"data.path '.*in' holds no files; the input is empty"):
        prepare(spark, cfg)


def test_misspelled_feature_column_suggests_the_closest(spark, tmp_path):
    features = [ColumnSpec(name="sepal_lenght", type="float")] + FEATURES[1:]
    cfg = _config(tmp_path, _csv(tmp_path / "iris.csv", [HEADER] + GOOD), features=features)
    with pytest.raises(
        SparkmlParError,
        match=r"data.features\[0\].name: column 'sepal_lenght' is not in the input; "
        r"did you mean 'sepal_length'\?",
    ):
        prepare(spark, cfg)


def test_misspelled_label_suggests_the_closest(spark, tmp_path):
    cfg = _config(tmp_path, _csv(tmp_path / "iris.csv", [HEADER] + GOOD), label="Species")
    with pytest.raises(
        SparkmlParError,
        match=r"data.label: column 'Species' is not in the input; "
        r"did you mean 'species'\?",
    ):
        prepare(spark, cfg)


@pytest.mark.parametrize("sep", [";", "\t"])
def test_a_csv_with_another_separator_gets_the_setting_that_reads_it(spark, tmp_path, sep):
    lines = [line.replace(",", sep) for line in [HEADER] + GOOD]
    cfg = _config(tmp_path, _csv(tmp_path / "iris.csv", lines))
    with pytest.raises(
        SparkmlParError,
        match=rf"data.label: column 'species' is not in the input; the input has one "
        rf"column, whose name holds {re.escape(repr(sep))}: .* so set "
        rf"data.csv_sep={re.escape(repr(sep))}; ",
    ):
        prepare(spark, cfg)
    assert len(prepare(spark, dataclasses.replace(cfg, csv_sep=sep)).manifest["raw_feature_columns"]) == len(FEATURES)


def test_text_label_names_the_classes(spark, tmp_path):
    lines = [HEADER] + GOOD + ["5.0,3.0,,1"]  # one row without a color: quarantined, not a class
    cfg = _config(tmp_path, _csv(tmp_path / "iris.csv", lines), label="color", features=FEATURES[:2])
    m = prepare(spark, cfg).manifest
    assert m["classes"] == ["blue", "green", "red"] and m["num_classes"] == 3
    assert m["class_counts"] == {"0": 13, "1": 13, "2": 14} and m["class_warnings"] == []
    assert m["quarantine"]["reasons"] == {"null:color": 1}
    rows = spark.read.parquet(f"{tmp_path / 'dataset'}/train").collect()
    # GOOD row i has color ['red', 'blue', 'green'][i % 3]: the index of that name among the sorted classes
    assert {r["color"] for r in rows} == {0, 1, 2}


def test_more_text_classes_than_num_classes_says_how_many(spark, tmp_path):
    cfg = _config(
        tmp_path, _csv(tmp_path / "iris.csv", [HEADER] + GOOD), label="color", features=FEATURES[:2], num_classes=2
    )
    with pytest.raises(
        SparkmlParError,
        match=r"^data.label: column 'color' holds 3 distinct classes \('blue', "
        r"'green', 'red'\) but data.num_classes=2; set data.num_classes=3 or 0",
    ):
        prepare(spark, cfg)


def test_a_stray_label_value_is_reported_with_the_counts(spark, tmp_path):
    lines = [HEADER] + GOOD + ["5.0,3.0,red,7"]
    m = prepare(spark, _config(tmp_path, _csv(tmp_path / "iris.csv", lines))).manifest
    assert m["num_classes"] == 8 and m["class_counts"] == {"0": 14, "1": 13, "2": 13, "7": 1}
    assert m["class_warnings"] == [
        "class ids 3, 4, 5, 6 of 0..7 have no rows; the model still has 8 outputs (a stray label value, or set "
        "data.num_classes)",
        "classes with very few rows: 7: 1 rows (the average class has 10); check the label column for stray values",
    ]


def test_fractional_label_for_classification_suggests_regression(spark, tmp_path):
    cfg = _config(tmp_path, _csv(tmp_path / "iris.csv", [HEADER] + GOOD), label="sepal_width", features=[FEATURES[0]])
    with pytest.raises(
        SparkmlParError,
        match=r"column 'sepal_width' holds fractional numbers \(29 of 40 values\), "
        r"but data.task=classification needs integer class ids; "
        r"set data.task=regression",
    ):
        prepare(spark, cfg)


def test_label_of_a_nested_type_is_refused(spark, tmp_path):
    rows = [{"x": float(i), "y": [i, i]} for i in range(10)]
    (tmp_path / "rows.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = _config(
        tmp_path, str(tmp_path / "rows.json"), source="json", label="y", features=[ColumnSpec(name="x", type="float")]
    )
    with pytest.raises(
        SparkmlParError,
        match=r"data.label: column 'y' has type array<bigint>, but a classification "
        r"label must be a number",
    ):
        prepare(spark, cfg)


def test_json_lines_malformed_lines_are_quarantined(spark, tmp_path):
    lines = [json.dumps({"x": float(i), "y": i % 2}) for i in range(100)] + ['{"x": 1.0, "y": ', "not json"]
    (tmp_path / "rows.json").write_text("\n".join(lines) + "\n")
    cfg = _config(
        tmp_path, str(tmp_path / "rows.json"), source="json", label="y", features=[ColumnSpec(name="x", type="float")]
    )
    result = prepare(spark, cfg)
    assert result.manifest["quarantine"]["reasons"] == {"malformed_row": 2}
    raw = sorted(r["_raw_record"] for r in spark.read.parquet(f"{result.output}/quarantine").collect())
    assert raw == ["not json", '{"x": 1.0, "y": ']
