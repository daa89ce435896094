"""The prepare job end to end: digits, a featurized tabular CSV, images, re-runs, publishing and the script."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from data_prep import job
from data_prep.job import _repeated_rows, prepare, summary
from data_prep.profile import column_statistics, count_duplicates
from data_prep.score_rows import apply_feature_pipeline
from sparkml_par.config import DataConfig, SplitConfig, SyntheticConfig, load_config
from sparkml_par.errors import SparkmlParError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def digits(spark, tmp_path_factory):
    out = tmp_path_factory.mktemp("digits") / "dataset"
    return prepare(spark, DataConfig(source="digits", output=str(out), max_shards=4))


@pytest.mark.stack
def test_digits_manifest(digits):
    m = digits.manifest
    assert not digits.skipped
    assert m["format_version"] == 1 and m["task"] == "classification" and m["num_classes"] == 10
    assert m["label_column"] == "label" and m["feature_column"] == "features" and m["feature_shape"] == [1, 8, 8]
    assert m["feature_pipeline"] is None and m["raw_feature_columns"] == ["features"]
    assert m["rows_in"] == m["rows_clean"] == 1797 and m["quarantine"] == {
        "path": "quarantine",
        "rows": 0,
        "reasons": {},
    }
    assert set(m["splits"]) == {"train", "validation", "test"} and m["max_shards"] == 4
    assert sum(s["rows"] for s in m["splits"].values()) == 1797
    assert 0.75 < m["splits"]["train"]["rows"] / 1797 < 0.85
    for name, split in m["splits"].items():
        assert split["path"] == name and split["row_groups"] % 4 == 0
        assert sum(split["files"].values()) == split["rows"]
    assert m["profile"] == "profile.json" and len(m["fingerprint"]) == 32 and m["created"].endswith("+00:00")


def test_python_workers_start_and_the_statistics_run_beside_the_steps_before_the_write(digits):
    steps = {s["step"]: s for s in digits.steps}
    assert steps["start workers"]["jobs"] == 1 and steps["write splits"]["jobs"] == 1
    # The statistics ran beside the steps, once, and counted the repeated rows too (no step of their own):
    # featurize used their result and ran no job.
    assert steps["statistics"]["jobs"] == 1 and steps["statistics"]["rows"] == 1797
    assert steps["featurize"]["jobs"] == 0 and "repeated rows" not in steps


def test_an_input_without_rejected_rows_gets_an_empty_quarantine_of_the_rejected_rows_schema(spark, digits):
    quarantine = spark.read.parquet(f"{digits.output}/quarantine")
    assert quarantine.count() == 0
    assert quarantine.schema.simpleString() == (
        "struct<_row_id:bigint,features:string,label:string,_raw_record:string,_reject_reason:string>"
    )
    steps = {s["step"]: s for s in digits.steps}
    assert steps["quarantine"]["rows"] == 0 and steps["quarantine"]["jobs"] == 0  # written without a Spark job


def test_digits_files_on_disk(digits):
    root = Path(digits.output[len("file://") :])
    visible = sorted(p.name for p in root.iterdir() if not p.name.startswith("."))  # Hadoop adds .crc files
    assert visible == ["_manifest.json", "profile.json", "quarantine", "test", "train", "validation"]
    assert json.loads((root / "_manifest.json").read_text()) == digits.manifest
    for name, split in digits.manifest["splits"].items():
        on_disk = {p.name for p in (root / name).glob("*.parquet")}
        assert on_disk == set(split["files"])
    profile = json.loads((root / "profile.json").read_text())
    assert profile["rows"] == 1797 and profile["duplicates"] == digits.manifest["duplicates"]
    assert profile["label_distribution"]["0"] == 178 and sum(profile["label_distribution"].values()) == 1797
    features = profile["columns"]["features"]
    assert features["min"] == 0.0 and features["max"] == 1.0 and features["elements"] == 1797 * 64
    assert profile["columns"]["label"]["distinct"] == 10


@pytest.mark.stack
def test_digits_values_and_splits_read_back_through_spark(spark, digits):
    from pyspark.sql import functions as F
    from sklearn.datasets import load_digits

    parts = [
        spark.read.parquet(f"{digits.output}/{name}").withColumn("split", F.lit(name))
        for name in ("train", "validation", "test")
    ]
    rows = parts[0].unionByName(parts[1]).unionByName(parts[2])
    assert rows.count() == 1797 and rows.select("_row_id").distinct().count() == 1797
    expected = load_digits()
    sample = {r["_row_id"]: r for r in rows.where(F.col("_row_id") < 20).collect()}
    for i in range(20):
        assert sample[i]["label"] == expected.target[i]
        assert np.allclose(sample[i]["features"], expected.data[i] / 16.0)


@pytest.mark.stack
def test_digits_shards_through_make_reader(digits):
    from petastorm import make_reader

    url = f"{digits.output}/train"
    counts = []
    for shard in range(2):
        with make_reader(url, reader_pool_type="dummy", num_epochs=1, cur_shard=shard, shard_count=2) as reader:
            rows = list(reader)
        counts.append(len(rows))
        assert rows[0].features.shape == (64,) and rows[0].features.dtype == np.float32
    assert sum(counts) == digits.manifest["splits"]["train"]["rows"] and abs(counts[0] - counts[1]) <= 2


def test_rerun_with_the_same_input_and_config_is_a_no_op(spark, digits):
    again = prepare(spark, DataConfig(source="digits", output=digits.output, max_shards=4))
    assert again.skipped and again.manifest == digits.manifest
    assert "unchanged, nothing to do" in summary(again)


def test_output_with_another_fingerprint_is_refused_then_overwritten(spark, tmp_path):
    out = str(tmp_path / "ds")
    first = prepare(
        spark,
        DataConfig(
            source="synthetic", synthetic=SyntheticConfig(rows=400, features=4, classes=3), output=out, max_shards=2
        ),
    )
    other = DataConfig(
        source="synthetic", synthetic=SyntheticConfig(rows=500, features=4, classes=3), output=out, max_shards=2
    )
    with pytest.raises(
        SparkmlParError,
        match=r"data.output '.*ds' already holds a dataset built from a different "
        r"config or input .*set data.mode=overwrite",
    ):
        prepare(spark, other)
    other.mode = "overwrite"
    second = prepare(spark, other)
    assert not second.skipped and second.manifest["fingerprint"] != first.manifest["fingerprint"]
    assert second.manifest["rows_in"] == 500
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]


def test_output_that_is_not_a_dataset_is_refused(spark, tmp_path):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "notes.txt").write_text("mine")
    with pytest.raises(SparkmlParError, match=r"already exists and is not a dataset \(no _manifest.json\)"):
        prepare(spark, DataConfig(source="digits", output=str(tmp_path / "ds")))
    assert (tmp_path / "ds" / "notes.txt").read_text() == "mine"


def test_unwritable_output(spark, tmp_path):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(
        SparkmlParError,
        match=r"cannot write to data.output '.*a_file/ds' .*choose a writable "
        r"data.output",
    ):
        prepare(spark, DataConfig(source="digits", output=str(tmp_path / "a_file" / "ds")))


def test_a_failed_job_leaves_no_dataset_and_no_staging(spark, tmp_path):
    cfg = DataConfig(
        source="synthetic",
        synthetic=SyntheticConfig(rows=60, features=2, classes=2),
        output=str(tmp_path / "ds"),
        max_shards=16,
    )
    with pytest.raises(SparkmlParError, match=r"split has \d+ rows, fewer than data.max_shards=16"):
        prepare(spark, cfg)
    assert list(tmp_path.iterdir()) == []


def test_the_python_workers_start_on_every_core_but_one(spark):
    """The workers' start leaves a core to the steps beside it: validation's first task runs at once."""
    from data_prep.write import start_workers
    from sparkml_par.spark_runtime.spark_jobs import spark_job

    sc = spark.sparkContext
    with spark_job(sc, "start workers") as job:
        start_workers(spark)
    tracker = sc.statusTracker()
    (job_id,) = tracker.getJobIdsForGroup(job.group)
    tasks = [tracker.getStageInfo(stage).numTasks for stage in tracker.getJobInfo(job_id).stageIds]
    assert sc.defaultParallelism == 2 and tasks == [1]


def test_a_failed_step_stops_the_jobs_beside_it(spark, tmp_path, monkeypatch):
    """A job beside the steps (here the Python workers' start, made to run until it is cancelled) is cancelled
    when a step fails: prepare raises the step's error with no job of its own left running."""

    def start_workers(spark):
        def endless(batches):
            import time

            time.sleep(600)
            yield from batches

        spark.range(0, 1, 1, 1).mapInArrow(endless, "id long").collect()

    monkeypatch.setattr("data_prep.job.start_workers", start_workers)
    raw = tmp_path / "raw.csv"
    raw.write_text("x,label\n1.0,0\n2.0,1\n")
    cfg = DataConfig(source="csv", path=str(raw), label="no_such_column", output=str(tmp_path / "ds"))
    with pytest.raises(SparkmlParError, match="data.label: column 'no_such_column' is not in the input"):
        prepare(spark, cfg)
    assert spark.sparkContext.statusTracker().getActiveJobsIds() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw.csv"]


def test_what_a_killed_job_left_beside_the_output_is_cleared(spark, tmp_path):
    """A staging directory is deleted; an old dataset moved aside with nothing in its place is put back."""
    cfg = DataConfig(source="digits", max_shards=2, output=str(tmp_path / "ds"))
    prepare(spark, cfg)
    (tmp_path / "ds.tmp-0123456789ab" / "train").mkdir(parents=True)
    (tmp_path / "ds").rename(tmp_path / "ds.old-0123456789ab")
    again = prepare(spark, cfg)
    assert again.skipped and (tmp_path / "ds" / "_manifest.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_synthetic_rows_and_splits_do_not_depend_on_partitioning(spark, tmp_path):
    def rows(partitions):
        out = tmp_path / f"p{partitions}"
        cfg = DataConfig(
            source="synthetic",
            output=str(out),
            max_shards=2,
            synthetic=SyntheticConfig(rows=9000, features=3, classes=4, seed=7, partitions=partitions),
        )
        result = prepare(spark, cfg)
        got = {}
        for name in ("train", "validation", "test"):
            for r in spark.read.parquet(f"{result.output}/{name}").collect():
                got[r["_row_id"]] = (name, tuple(r["features"]), r["label"])
        return result.manifest, got

    m1, one = rows(1)
    m3, three = rows(3)
    assert one == three and len(one) == 9000
    assert m1["fingerprint"] == m3["fingerprint"]
    assert {k: v["rows"] for k, v in m1["splits"].items()} == {k: v["rows"] for k, v in m3["splits"].items()}


def _customers_csv(path: Path, n: int = 400) -> None:
    rng = np.random.default_rng(0)
    lines = ["customer_id,age,monthly_spend,tenure_months,plan,region,churned"]
    for i in range(n):
        spend = "" if i % 25 == 0 else f"{rng.uniform(5, 200):.2f}"  # missing values get imputed
        plan = ["basic", "plus", "premium"][i % 3]
        lines.append(f"c{i},{20 + i % 50},{spend},{i % 36},{plan},{['north', 'south'][i % 2]},{int(i % 7 == 0)}")
    lines.append("c0,20,,0,basic,north,1")  # an exact duplicate of c0: dropped by dedupe
    lines.append("c9999,17,10.0,3,basic,north,0")  # age below min: quarantined
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def tabular(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("tabular")
    _customers_csv(base / "customers.csv")
    cfg = load_config(
        ROOT / "conf" / "tabular.yaml", [f"data.path={base / 'customers.csv'}", f"data.output={base / 'dataset'}"]
    )
    return prepare(spark, cfg.data), base


def test_tabular_csv_is_validated_deduplicated_and_featurized(tabular):
    result, base = tabular
    m = result.manifest
    assert m["rows_in"] == 402 and m["quarantine"]["reasons"] == {"out_of_range:age": 1}
    assert m["duplicates"] == 1 and sum(s["rows"] for s in m["splits"].values()) == 400
    # 3 numbers + one-hot plan and region: their seen categories, plus one for unseen ones ('keep')
    assert m["feature_shape"] == [3 + 4 + 3]
    assert m["raw_feature_columns"] == ["age", "monthly_spend", "tenure_months", "plan", "region"]
    # The pipeline as numbers: a fill per number column, the kept categories, the scaler's moments per feature;
    # no saved Spark ML model beside the splits.
    recipe = m["feature_pipeline"]
    assert [n["column"] for n in recipe["numbers"]] == ["age", "monthly_spend", "tenure_months"]
    assert all(isinstance(n["fill"], float) for n in recipe["numbers"])
    assert [len(labels) for labels in recipe["categories"].values()] == [3, 2]
    assert len(recipe["scale"]["mean"]) == len(recipe["scale"]["std"]) == 3 + 4 + 3
    assert not (base / "dataset" / "feature_pipeline").exists()
    profile = json.loads((base / "dataset" / "profile.json").read_text())
    assert profile["columns"]["monthly_spend"]["nulls"] == 16 and profile["deduplicated"] is True


@pytest.mark.parametrize("hashed_on_driver_rows", [job.HASHED_ON_DRIVER_ROWS, 0])
def test_repeated_rows_kept_without_dedupe_get_ids_of_their_own(spark, tabular, monkeypatch, hashed_on_driver_rows):
    """The exact duplicate row of the CSV shares its content's row id with the row it repeats; kept (no
    dedupe), it is counted, numbered apart and written with every other row, each id once: counted by the
    column statistics' tasks, or by a Spark aggregate of its own past HASHED_ON_DRIVER_ROWS clean rows."""
    _, base = tabular
    monkeypatch.setattr(job, "HASHED_ON_DRIVER_ROWS", hashed_on_driver_rows)
    output = base / f"kept-{hashed_on_driver_rows}"
    cfg = load_config(
        ROOT / "conf" / "tabular.yaml",
        [f"data.path={base / 'customers.csv'}", f"data.output={output}", "data.dedupe=false"],
    )
    result = prepare(spark, cfg.data)
    m = result.manifest
    assert m["duplicates"] == 1 and sum(s["rows"] for s in m["splits"].values()) == 401
    steps = [step["step"] for step in result.steps]
    assert ("repeated rows" in steps) == (hashed_on_driver_rows == 0)
    ids = spark.read.parquet(*[f"{output}/{name}" for name in m["splits"]]).select("_row_id")
    assert ids.count() == 401 and ids.distinct().count() == 401


def test_feature_pipeline_was_fitted_on_train_and_scoring_reproduces_the_features(spark, tabular):
    from pyspark.sql import functions as F

    result, base = tabular
    train = np.array([r["features"] for r in spark.read.parquet(f"{result.output}/train").collect()])
    assert np.allclose(train.mean(axis=0), 0.0, atol=1e-5)  # standard-scaled with train statistics
    raw = spark.read.option("header", "true").csv(str(base / "customers.csv"))
    scored = apply_feature_pipeline(raw, str(base / "dataset"))  # the row id prepare gave each row, from its content
    test = spark.read.parquet(f"{result.output}/test").select("_row_id", F.col("features").alias("written"))
    joined = test.join(scored.select("_row_id", "features"), "_row_id").collect()
    assert len(joined) == result.manifest["splits"]["test"]["rows"]
    # The write tasks compute the features from Arrow batches, scoring through Spark ML: the same float32 values.
    for row in joined:
        np.testing.assert_array_equal(row["written"], row["features"])


def test_scoring_input_missing_a_raw_column(spark, tabular):
    result, base = tabular
    raw = spark.read.option("header", "true").csv(str(base / "customers.csv")).withColumnRenamed("plan", "plan_x")
    with pytest.raises(
        SparkmlParError,
        match=r"scoring input: column 'plan' is not in the input; "
        r"did you mean 'plan_x'\?",
    ):
        apply_feature_pipeline(raw, result.output)


def test_image_folders(spark, tmp_path):
    from PIL import Image

    for label, value in (("cat", 40), ("dog", 200)):
        (tmp_path / "images" / label).mkdir(parents=True)
        for i in range(6):
            Image.fromarray(np.full((10, 12), value + i, dtype=np.uint8)).save(tmp_path / "images" / label / f"{i}.png")
    (tmp_path / "images" / "dog" / "broken.png").write_bytes(b"not a png")
    cfg = DataConfig(
        source="images",
        path=str(tmp_path / "images"),
        image_size=[4, 4],
        max_shards=1,
        max_reject_fraction=0.2,
        output=str(tmp_path / "ds"),
        split=SplitConfig(train=1.0, validation=0.0, test=0.0),
    )
    result = prepare(spark, cfg)
    m = result.manifest
    assert m["classes"] == ["cat", "dog"] and m["feature_shape"] == [1, 4, 4] and m["num_classes"] == 2
    assert m["quarantine"]["reasons"] == {"undecodable_image": 1} and list(m["splits"]) == ["train"]
    rows = spark.read.parquet(f"{result.output}/train").collect()
    assert len(rows) == 12
    for r in rows:
        expected = (40 if r["label"] == 0 else 200) / 255.0
        assert len(r["features"]) == 16 and expected <= r["features"][0] <= expected + 6 / 255.0 + 1e-6


def test_parquet_input_with_typed_columns(spark, tmp_path):
    df = spark.range(200).selectExpr(
        "CAST(id AS double) AS x", "CAST(id % 5 AS double) * 0.5 AS y", "CAST(id % 2 AS int) AS target"
    )
    df.write.parquet(str(tmp_path / "in"))
    cfg = load_config(
        None,
        [
            "data.source=parquet",
            f"data.path={tmp_path / 'in'}",
            "data.label=target",
            f"data.output={tmp_path / 'ds'}",
            "data.max_shards=2",
            "data.featurize.scale=false",
        ],
    ).data
    m = prepare(spark, cfg).manifest
    assert m["raw_feature_columns"] == ["x", "y"] and m["feature_shape"] == [2] and m["num_classes"] == 2
    back = spark.read.parquet(f"{tmp_path / 'ds'}/train").orderBy("features").first()
    assert back["features"][1] == back["features"][0] % 5 * 0.5 and back["target"] == int(back["features"][0]) % 2


def test_a_label_named_count_is_counted_per_class(spark, tmp_path):
    """Rows per class come from a groupBy whose own column is named `count`: a label of that name is counted."""
    df = spark.range(300).selectExpr("CAST(id AS double) AS x", "CAST(id % 3 AS int) AS count")
    df.write.parquet(str(tmp_path / "in"))
    cfg = load_config(
        None,
        [
            "data.source=parquet",
            f"data.path={tmp_path / 'in'}",
            "data.label=count",
            f"data.output={tmp_path / 'ds'}",
            "data.max_shards=2",
        ],
    ).data
    m = prepare(spark, cfg).manifest
    assert m["class_counts"] == {"0": 100, "1": 100, "2": 100} and m["num_classes"] == 3
    assert sum(split["rows"] for split in m["splits"].values()) == 300


def test_rows_per_split_class_partition_and_category_come_with_the_column_statistics(spark):
    """The writer plans each split's files from these partition counts: they must be the partitions' own,
    from tasks that each read several partitions. The label and a text feature are named like columns of
    the statistics' own."""
    from sparkml_par.config import ColumnSpec

    rows = spark.range(0, 90, 1, numPartitions=6).selectExpr(
        "CASE WHEN id % 3 = 0 THEN 'test' ELSE 'train' END AS _split",
        "id % 2 AS _n",
        "CASE WHEN id % 5 = 0 THEN 'a' WHEN id % 7 = 0 THEN NULL ELSE 'b' END AS _partition",
    )
    specs = [ColumnSpec("_partition", "string")]
    counted = column_statistics(rows, "_n", specs, counts=True, classes=True)
    assert counted.splits == {"train": 60, "test": 30} and counted.classes == {"0": 45, "1": 45}
    assert counted.partitions == {"train": {p: 10 for p in range(6)}, "test": {p: 5 for p in range(6)}}
    # The train split's categories only: 18 multiples of 5 in 0..89, 6 of them (multiples of 15) in test;
    # missing values: 10 multiples of 7 but not of 5, 4 of them (multiples of 21) in test.
    assert sorted(counted.categories["_partition"], key=str) == [("a", 12), ("b", 42), (None, 6)]
    regression = column_statistics(rows, "_n", specs, counts=True)
    assert regression.classes is None and regression.partitions == counted.partitions
    assert regression.categories == counted.categories
    uncounted = column_statistics(rows, "_n", specs)
    assert uncounted.splits == {} and uncounted.classes is None and uncounted.categories == {}


def test_rows_repeating_a_content_hash_are_counted_apart_on_many_rows_a_partition_alike(spark, monkeypatch):
    """From HASH_APART_ROWS rows a partition the hash's rows are numbered in a sorted window of their own."""
    rows = spark.range(0, 90, 1, numPartitions=3).selectExpr("id AS _hash", "id % 2 AS _n", "'a' AS t")
    # The content hashed: 2 distinct (label, text) pairs in 90 rows, so 88 rows repeat an earlier one.
    assert _repeated_rows(rows, ["_n", "t"], 90) == 88 and _repeated_rows(rows, ["_hash"], 90) == 0
    monkeypatch.setattr(job, "HASH_APART_ROWS", 29)
    assert _repeated_rows(rows, ["_n", "t"], 90) == 88 and _repeated_rows(rows, ["_hash"], 90) == 0
    assert _repeated_rows(rows.where("false"), ["_n", "t"], 0) == 0


def test_duplicates_are_counted_exactly_with_and_without_repeated_rows(spark):
    rows = spark.createDataFrame(
        [
            (1, 0.0, "a", [1.0, 2.0]),
            (2, -0.0, "a", [1.0, 2.0]),  # row 1 again: -0.0 is 0.0
            (3, 1.0, "a", [1.0, 2.0]),
            (4, 1.0, "b", [1.0, 2.0]),
            (5, 1.0, "b", [1.0, 2.0]),  # row 4 again
            (6, 1.0, "b", [2.0, 1.0]),
        ],
        "_row_id long, x double, s string, v array<float>",
    )
    assert count_duplicates(rows, ["x", "s", "v"], 6) == 2
    assert count_duplicates(rows.where("_row_id NOT IN (2, 5)"), ["x", "s", "v"], 4) == 0


def test_copies_are_numbered_from_their_groups_each_id_once(spark):
    """Rows that share a content-hash id get ids of their own from the aggregate of their groups: the first
    copy keeps the id, the n-th gets a hash of the id and n. Two contents whose hashes collide (id 11) number
    on from each other in content order."""
    from data_prep.profile import COPIES, content_groups
    from data_prep.split import copy_offsets, numbered_copies

    rows = spark.createDataFrame(
        [(7, 1.0, "a"), (7, 1.0, "a"), (7, 1.0, "a"), (9, 2.0, "a"), (11, 3.0, "c"), (11, 3.0, "b"), (11, 3.0, "b")],
        "_row_id long, x double, s string",
    )
    groups = content_groups(rows, ["x", "s"])
    assert sorted((r["_row_id"], r["s"], r[COPIES]) for r in groups.collect()) == [
        (7, "a", 3),
        (9, "a", 1),
        (11, "b", 2),
        (11, "c", 1),
    ]
    numbered = numbered_copies(copy_offsets(groups, ["x", "s"]), ["x", "s"])
    assert numbered.columns == ["_row_id", "x", "s"]
    expected = spark.sql(
        "SELECT * FROM VALUES (7L, 1.0D, 'a'), (xxhash64(7L, 2), 1.0D, 'a'), (xxhash64(7L, 3), 1.0D, 'a'), "
        "(9L, 2.0D, 'a'), (11L, 3.0D, 'b'), (xxhash64(11L, 2), 3.0D, 'b'), (xxhash64(11L, 3), 3.0D, 'c') "
        "AS t(_row_id, x, s)"
    ).collect()
    assert sorted(numbered.collect()) == sorted(expected)
    assert numbered.select("_row_id").distinct().count() == 7


def test_prepare_command_and_spark_submit_entry(tmp_path, capsys):
    from sparkml_par.cli import run_job

    assert 'run_job("prepare")' in (ROOT / "jobs" / "prepare.py").read_text()
    conf = tmp_path / "digits.yaml"
    conf.write_text("data:\n  source: digits\n  max_shards: 2\n")
    assert run_job("prepare", ["--config", str(conf), f"data.output={tmp_path / 'ds'}"]) == 0
    out = capsys.readouterr().out
    assert "rows in       1797" in out and "quarantined   0" in out and "rows/s" in out
    assert run_job("prepare", ["--config", str(conf), f"data.output={tmp_path / 'ds2'}", "data.source=csv"]) == 2
    assert "error: data.path: source 'csv' reads files, so data.path must be set" in capsys.readouterr().err


def test_profile_names_any_column(spark):
    """Column names that SQL must quote (a pipe, a backtick, a dot, a space) get their own statistics."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, DoubleType, FloatType, LongType, StringType, StructField, StructType

    from data_prep.profile import profile
    from sparkml_par.config import ColumnSpec

    schema = StructType(
        [
            StructField("x|y", DoubleType()),
            StructField("it`s", StringType()),
            StructField("v.1", ArrayType(FloatType())),
            StructField("class label", LongType()),
        ]
    )
    rows = [(1.0, "a", [1.0, 2.0], 0), (3.0, None, [3.0, 4.0], 1), (None, "b", [5.0, 6.0], 1)]
    specs = [ColumnSpec("x|y", "float"), ColumnSpec("it`s", "string"), ColumnSpec("v.1", "vector")]
    df = spark.createDataFrame(rows, schema).withColumn("_split", F.lit("train"))
    stats = profile(df, "class label", specs, column_statistics(df, "class label", specs, counts=True, classes=True))

    assert stats["rows"] == 3 and stats["label_distribution"] == {"0": 1, "1": 2}
    columns = stats["columns"]
    assert columns["x|y"] == {
        "nulls": 1,
        "min": 1.0,
        "max": 3.0,
        "mean": 2.0,
        "stddev": pytest.approx(2**0.5),
        "distinct": 2,
    }
    assert columns["it`s"] == {"nulls": 1, "distinct": 2}
    assert columns["v.1"]["min"] == 1.0 and columns["v.1"]["max"] == 6.0 and columns["v.1"]["elements"] == 6
    assert columns["v.1"]["mean"] == pytest.approx(3.5) and columns["v.1"]["nulls"] == 0
    assert columns["class label"]["max"] == 1 and columns["class label"]["mean"] == pytest.approx(2 / 3)
    # An integer label's bounds stay integers, though the profile aggregates every number as a double.
    assert type(columns["class label"]["min"]) is int and type(columns["x|y"]["min"]) is float


@pytest.mark.stack
def test_statistics_give_the_profile_and_the_train_split_figures_with_medians_or_without(spark):
    """The statistics of numbers, texts and a timestamp's parts: the profile's over every row (with distinct
    counts), the train split's moments, and its medians only where asked for."""
    import datetime

    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType, TimestampType

    from data_prep import featurize
    from data_prep.profile import profile
    from sparkml_par.config import ColumnSpec

    schema = StructType(
        [
            StructField("x", DoubleType()),
            StructField("s", StringType()),
            StructField("t", TimestampType()),
            StructField("y", LongType()),
            StructField("_split", StringType()),
        ]
    )
    day = datetime.datetime(2026, 1, 1)
    rows = [(float(i % 5), f"c{i % 3}", day + datetime.timedelta(hours=i % 4), i % 2, "train") for i in range(40)]
    df = spark.createDataFrame(rows + [(None, None, None, 1, "test")], schema)
    specs = [ColumnSpec("x", "float"), ColumnSpec("s", "string"), ColumnSpec("t", "timestamp")]
    numbers = featurize.number_inputs(specs)

    with_medians = column_statistics(df, "y", specs, numbers, medians=True)
    without = column_statistics(df, "y", specs, numbers)

    assert with_medians.distinct == without.distinct == {"y": 2, "x": 5, "s": 3, "t": 4}
    assert with_medians.rows == 41 and with_medians.train_rows == 40
    assert with_medians.train[("x", None)] == (40, 2.0, pytest.approx(80 / 39), 2.0)
    assert with_medians.train[("t", "hour")][3] == 1.0 and without.train[("x", None)][3] is None
    assert without.train[("x", None)][:3] == with_medians.train[("x", None)][:3]
    assert profile(df, "y", specs, without) == profile(df, "y", specs, with_medians)
    assert profile(df, "y", specs, without)["columns"]["t"] == {"nulls": 1, "distinct": 4}
    x = profile(df, "y", specs)["columns"]["x"]
    assert x == {
        "nulls": 1,
        "min": 0.0,
        "max": 4.0,
        "mean": 2.0,
        "stddev": pytest.approx((80 / 39) ** 0.5),
        "distinct": 5,
    }


def test_profile_of_no_rows(spark):
    """A frame without rows profiles as zero rows, zero nulls and no bounds, not as a missing column."""
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    from data_prep.profile import profile
    from sparkml_par.config import ColumnSpec

    schema = StructType([StructField("x", DoubleType()), StructField("s", StringType()), StructField("y", LongType())])
    stats = profile(spark.createDataFrame([], schema), "y", [ColumnSpec("x", "float"), ColumnSpec("s", "string")])

    assert stats == {
        "rows": 0,
        "columns": {
            "y": {"nulls": 0, "min": None, "max": None, "mean": None, "stddev": None, "distinct": 0},
            "x": {"nulls": 0, "min": None, "max": None, "mean": None, "stddev": None, "distinct": 0},
            "s": {"nulls": 0, "distinct": 0},
        },
    }
