"""Bad inputs across the product, as one table run by one test.

Every case goes through a real entry point (prepare, load_config, train, score_job, the launcher) on the
shared SparkSession. It is either refused with a message that names the setting, the value and the fix,
or quarantined with exact counts and reasons; and it never leaves partial output: nothing new at the
output path, no `out.tmp-*` staging sibling, and an output that was already there is left untouched.
"""

from __future__ import annotations

import collections
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from data_prep.job import prepare
from sparkml_par import launch
from sparkml_par.config import ColumnSpec, DataConfig, FeaturizeConfig, SplitConfig, SyntheticConfig, load_config
from sparkml_par.errors import SparkmlParError
from sparkml_par.infer import score_job
from sparkml_par.train.job import train

OUT = "out"  # every case writes (or would write) tmp_path / OUT
HEADER = "width,count,label"
GOOD = [f"{1 + i * 0.5},{i % 4},{i % 3}" for i in range(12)]
FEATURES = [ColumnSpec(name="width", type="float"), ColumnSpec(name="count", type="int")]
# Parquet's own words for a cut file: Spark 4.0's reader finds no magic number, Spark 4.3's first reads the
# footer length the cut left behind.
UNREADABLE_PARQUET = r"(.*is not a Parquet file.*|footer is too large: \d+ ?to be read)"


@dataclass(frozen=True)
class Case:
    """`arrange(spark, tmp_path, model_root)` writes the inputs and returns the call under test."""

    id: str
    arrange: Callable[[Any, Path, Path | None], Callable[[], Any]]
    error: str | None = None  # regex the SparkmlParError's message must match
    quarantined: dict[str, int] | None = None  # else the run succeeds and quarantines exactly these rows
    kept: tuple[str, ...] = ()  # output entries a refusal keeps on purpose
    needs_model: bool = False


# --- inputs --------------------------------------------------------------------------------------------


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(f"{line}\n" for line in lines))
    return str(path)


def _prepare(spark, tmp: Path, **settings):
    """prepare() into tmp/out: one split and one shard, no scaling (fewer Spark jobs; not what is tested)."""
    defaults = dict(
        max_shards=1,
        max_reject_fraction=0.5,
        output=str(tmp / OUT),
        featurize=FeaturizeConfig(scale=False),
        split=SplitConfig(train=1.0, validation=0.0, test=0.0),
    )
    return lambda: prepare(spark, DataConfig(**{**defaults, **settings}))


def _csv(*bad: str, header: str = HEADER, good: list[str] = GOOD, **settings):
    """A CSV of the good rows with `bad` lines among them, prepared with the declared features."""

    def arrange(spark, tmp, _):
        lines = [header, *good[:6], *bad, *good[6:]] if header else list(bad)
        return _prepare(
            spark, tmp, source="csv", path=_write(tmp / "in.csv", lines), **{"features": list(FEATURES), **settings}
        )

    return arrange


def _json_lines(spark, tmp, _):
    good = [json.dumps({"width": 1.0 + i, "count": i % 4, "label": i % 3}) for i in range(12)]
    bad = [
        json.dumps({"width": "wide", "count": 1, "label": 0}),  # text where the other lines hold numbers
        json.dumps({"width": [1, 2], "count": 1, "label": 1}),  # an array there
        '{"width": 2.0, "count": ',
    ]  # a line cut short
    return _prepare(
        spark, tmp, source="json", path=_write(tmp / "in.json", good[:6] + bad + good[6:]), features=list(FEATURES)
    )


def _images(*broken: tuple[str, bytes | Callable[[], bytes]]):
    def arrange(spark, tmp, _):
        import numpy as np
        from PIL import Image

        for label, value in (("cat", 40), ("dog", 200)):
            (tmp / "in" / label).mkdir(parents=True)
            for i in range(4):
                Image.fromarray(np.full((6, 6), value + i, dtype=np.uint8)).save(tmp / "in" / label / f"{i}.png")
        for name, content in broken:
            (tmp / "in" / "dog" / name).write_bytes(content() if callable(content) else content)
        if not broken:  # a folder of class folders with no image in them
            for image in (tmp / "in").rglob("*.png"):
                image.rename(image.with_suffix(".txt"))
        return _prepare(spark, tmp, source="images", path=str(tmp / "in"), image_size=[4, 4])

    return arrange


def _png_head() -> bytes:
    """The first bytes of a real PNG: a file cut off in the middle of a copy."""
    import io

    import numpy as np
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((6, 6), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()[:40]


def _truncated_parquet(files: int):
    """Parquet files of which the last lost its second half (and with it the footer). Spark reads the footer of
    a lone file when it infers the schema, of the others only when a job reads them."""

    def arrange(spark, tmp, _):
        import pyarrow as pa
        import pyarrow.parquet as pq

        (tmp / "in").mkdir()
        for part in range(files):
            rows = range(part * 10, part * 10 + 10)
            pq.write_table(
                pa.table({"width": [float(i) for i in rows], "label": [i % 2 for i in rows]}),
                tmp / "in" / f"part-{part}.parquet",
            )
        cut = tmp / "in" / f"part-{files - 1}.parquet"
        cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
        return _prepare(spark, tmp, source="parquet", path=str(tmp / "in"))

    return arrange


def _other_dataset_at_output(spark, tmp, model_root):
    """A real dataset (the shared model's) at the output, and a config that describes another one."""
    import shutil

    shutil.copytree(model_root / "dataset", tmp / OUT)
    return _prepare(spark, tmp, source="synthetic", synthetic=SyntheticConfig(rows=16, features=2, classes=2))


def _not_a_dataset_at_output(spark, tmp, _):
    (tmp / OUT).mkdir()
    (tmp / OUT / "notes.txt").write_text("mine")
    return _prepare(spark, tmp, source="synthetic", synthetic=SyntheticConfig(rows=16, features=2, classes=2))


def _config(*overrides: str, file: str | None = None):
    def arrange(spark, tmp, _):
        path = None
        if file is not None:
            path = tmp / "conf.yaml"
            if file:
                path.write_text(file)
        return lambda: load_config(path, [f"data.output={tmp / OUT}", f"train.output={tmp / OUT}", *overrides])

    return arrange


def _train(*overrides: str, dataset: bool = True):
    """train() on the shared model's dataset (or on a path that holds none)."""

    def arrange(spark, tmp, model_root):
        data = model_root / "dataset" if dataset else tmp / "no_dataset"
        cfg = load_config(None, [f"data.output={data}", f"train.output={tmp / OUT}", "train.batch_size=8", *overrides])
        return lambda: train(spark, cfg)

    return arrange


def allreduce_ranks():
    """A rank function that never runs: the launch is refused before any task starts."""
    import horovod.torch as hvd
    import torch

    return hvd.allreduce(torch.ones(1), op=hvd.Sum).item()


def _launch(num_proc: int):
    return lambda spark, tmp, _: lambda: launch.Launcher(num_proc=num_proc, spark=spark).run(allreduce_ranks)


def _score(*overrides: str, write_input: Callable[[Any, str], None] | None = None, output_exists: bool = False):
    """score_job of the shared model on its test split, or on what write_input(test split, tmp/in) writes."""

    def arrange(spark, tmp, model_root):
        if write_input is not None:
            write_input(spark.read.parquet(str(model_root / "dataset" / "test")), str(tmp / "in"))
        if output_exists:
            (tmp / OUT).mkdir()
            (tmp / OUT / "notes.txt").write_text("mine")
        cfg = load_config(
            None,
            [
                f"data.output={model_root / 'dataset'}",
                f"train.output={model_root / 'train'}",
                f"score.output={tmp / OUT}",
                *[o.format(tmp=tmp) for o in overrides],
            ],
        )
        return lambda: score_job(spark, cfg)

    return arrange


def _short_features(df, path: str) -> None:
    df.selectExpr("_row_id", "slice(features, 1, 3) AS features").write.parquet(path)


def _one_short_row(df, path: str) -> None:
    from pyspark.sql import functions as F

    last = df.agg(F.max("_row_id")).first()[0]
    df.withColumn(
        "features", F.when(F.col("_row_id") == last, F.slice("features", 1, 3)).otherwise(F.col("features"))
    ).write.parquet(path)


def _cut_last_file(df, path: str) -> None:
    """The rows as three Parquet files, the last of which loses its second half (the footer with it)."""
    df.repartition(3).write.parquet(path)
    cut = sorted(Path(path).glob("part-*.parquet"))[-1]
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    for checksum in Path(path).glob(".*.crc"):  # a copy cut short has no Hadoop checksum beside it
        checksum.unlink()


# --- the table -----------------------------------------------------------------------------------------

CASES = [
    # Rows that are quarantined, with the run going on.
    Case("csv-malformed-lines", _csv("1.0,2,1,extra", "3.0"), quarantined={"malformed_row": 2}),
    Case(
        "csv-text-in-number-columns",
        _csv("wide,1,0", "1.5,two,1"),
        quarantined={"unparseable:width": 1, "unparseable:count": 1},
    ),
    Case("csv-fraction-in-an-int-column", _csv("1.0,2.5,0"), quarantined={"not_integer:count": 1}),
    # NaN is one of data.null_values (pandas reads it as missing); infinities are numbers no model takes.
    Case(
        "csv-nan-and-inf",
        _csv("NaN,1,0", "Infinity,1,1", "-Infinity,1,2"),
        quarantined={"null:width": 1, "nan_or_inf:width": 2},
    ),
    Case(
        "csv-r-export-missing-values",
        _csv("NA,1,0", "1.0,N/A,1", "1.0,1,NA", "1.0,null,2", null_values=["NA"]),
        quarantined={"null:width": 1, "null:label": 1, "unparseable:count": 2},
    ),
    Case(
        "csv-missing-values",
        _csv(",1,0", "1.0,,1", "1.0,1,"),
        quarantined={"null:width": 1, "null:count": 1, "null:label": 1},
    ),
    Case(
        "label-outside-the-class-range",
        _csv("1.0,1,3", "1.0,1,-1", num_classes=3),
        quarantined={"out_of_range:label": 2},
    ),
    Case("json-wrong-types-and-a-cut-line", _json_lines, quarantined={"unparseable:width": 2, "malformed_row": 1}),
    Case(
        "images-that-fail-to-decode",
        _images(("notes.png", b"not an image"), ("cut.png", _png_head)),
        quarantined={"undecodable_image": 2},
    ),
    # Inputs that are refused before anything is written.
    Case(
        "csv-empty-file",
        _csv(header=""),
        error=r"^data.path '.*in.csv' has no columns \(is the csv input empty\?\); point data.path at a "
        r"non-empty input$",
    ),
    Case(
        "csv-header-only",
        _csv(good=[]),
        error=r"^data.path '.*in.csv' has no rows \(csv input is empty\); point data.path at a non-empty input$",
    ),
    Case(
        "missing-input-path",
        lambda spark, tmp, _: _prepare(spark, tmp, source="csv", path=str(tmp / "none.csv")),
        error=r"^data.path '.*none.csv' does not exist \(resolved to 'file:///.*none.csv'\); check the path",
    ),
    Case(
        "image-folders-without-images",
        _images(),
        error=r"^data.path '.*in' holds no image files \(.png, .jpg, .jpeg\); the input is empty; point data.path "
        r"at a folder with one subfolder of images per class$",
    ),
    Case(
        "truncated-parquet-file",
        _truncated_parquet(files=1),
        error=rf"^data.path '.*in': cannot read 'file:.*/in/part-0.parquet' \({UNREADABLE_PARQUET}\); the "
        r"file is truncated or not parquet: write it again or remove it from data.path$",
    ),
    Case(
        "truncated-parquet-file-among-good-ones",
        _truncated_parquet(files=3),
        error=rf"^data.path '.*in': cannot read 'file:.*/in/part-2.parquet' \({UNREADABLE_PARQUET}\); the "
        r"file is truncated or not parquet: write it again or remove it from data.path$",
    ),
    Case(
        "missing-label-column",
        _csv(label="target"),
        error=r"^data.label: column 'target' is not in the input; the input's columns are 'width', 'count', "
        r"'label'; set data.label to one of them$",
    ),
    Case(
        "misspelled-feature-column",
        _csv(features=[ColumnSpec(name="widht"), FEATURES[1]]),
        error=r"^data.features\[0\].name: column 'widht' is not in the input; did you mean 'width'\? ",
    ),
    Case(
        "text-regression-label",
        _csv(
            header="width,count,kind", good=[f"{i}.5,{i},k{i % 2}" for i in range(12)], label="kind", task="regression"
        ),
        error=r"^data.label: column 'kind' holds text, not numbers \(12 of 12 values do not parse\); a "
        r"regression label must be numeric; choose another data.label, or set data.task=classification to "
        r"use its values as classes$",
    ),
    Case(
        "number-declared-as-vector",
        _csv(features=[ColumnSpec(name="width", type="vector", size=2)]),
        error=r"^data.features: column 'width' is declared type: vector but holds string; declare its real type "
        r"or convert it to an array of numbers$",
    ),
    Case(
        "too-many-rejected-rows",
        _csv("x,1,0", "y,1,0", max_reject_fraction=0.1),
        kept=(f"{OUT}.rejected",),
        error=r"^2 of 14 rows \(14.3%\) failed validation, more than data.max_reject_fraction=0.1 allows "
        r"\(unparseable:width: 2\); the rejected rows are in '.*out.rejected' .*or raise "
        r"data.max_reject_fraction$",
    ),
    Case(
        "output-holds-another-dataset",
        _other_dataset_at_output,
        kept=(OUT,),
        needs_model=True,
        error=r"^data.output '.*out' already holds a dataset built from a different config or input "
        r"\(fingerprint '\w{32}', created '.*' by `sparkml-par prepare` or the notebook API; this run's fingerprint "
        r"is '\w{32}'\); choose another data.output or set data.mode=overwrite$",
    ),
    Case(
        "output-is-not-a-dataset",
        _not_a_dataset_at_output,
        kept=(OUT,),
        error=r"^data.output '.*out' already exists and is not a dataset \(no _manifest.json\); choose another "
        r"data.output, remove it, or set data.mode=overwrite to replace it$",
    ),
    # Configs.
    Case("config-wrong-type", _config("train.epochs=three"), error=r"^train.epochs: expected an integer, got 'three'$"),
    Case(
        "config-unknown-key",
        _config("train.batchsize=32"),
        error=r"^unknown key 'train.batchsize': did you mean 'batch_size'\? valid keys here are model, ",
    ),
    Case(
        "config-negative-batch-size",
        _config("train.batch_size=-8"),
        error=r"^train.batch_size: -8 is below the minimum 1; use a value >= 1$",
    ),
    Case(
        "config-choice-typo",
        _config("train.optimizer=adamm"),
        error=r"^train.optimizer: 'adamm' is not allowed \(did you mean 'adam'\?\); choose one of 'sgd', 'adam', "
        r"'adamw'$",
    ),
    Case(
        "config-split-over-one",
        _config("data.split.train=0.9"),
        error=r"^data.split: train \+ validation \+ test = 0.9 \+ 0.1 \+ 0.1 = 1.1; the fractions must add up "
        r"to 1$",
    ),
    Case(
        "config-file-missing",
        _config(file=""),
        error=r"^config file '.*conf.yaml' does not exist; pass a YAML file such as conf/quickstart.yaml$",
    ),
    Case(
        "config-file-not-yaml",
        _config(file="train: [1, 2\n"),
        error=r"^config file '.*conf.yaml' is not valid YAML: .* at line 2, column 1$",
    ),
    Case(
        "config-more-ranks-than-slots",
        _train("train.num_proc=3"),
        needs_model=True,
        error=r"^num_proc=3 but the cluster has 2 task slots \(local\[2\]: 2 cores / spark.task.cpus=1\); lower "
        r"num_proc to 2 or add cores",
    ),
    # Training, launching and scoring.
    Case(
        "train-without-a-dataset",
        _train(dataset=False),
        error=r"^no dataset at data.output='.*no_dataset' \(no _manifest.json\); run `sparkml-par prepare` with "
        r"the same config first$",
    ),
    Case(
        "launch-more-ranks-than-slots",
        _launch(3),
        error=r"^num_proc=3 but the cluster has 2 task slots \(local\[2\]: 2 cores / spark.task.cpus=1\); lower "
        r"num_proc to 2 or add cores",
    ),
    Case(
        "score-model-path-missing",
        _score("score.model={tmp}/no_model"),
        needs_model=True,
        error=r"^model artifact '.*no_model' does not exist; train a model first \(sparkml-par train\) or point "
        r"score.model at an artifact directory$",
    ),
    Case(
        "score-input-path-missing",
        _score("score.input={tmp}/no_input"),
        needs_model=True,
        error=r"^score.input '.*no_input' does not exist; point score.input at a dataset directory",
    ),
    Case(
        "score-features-of-the-wrong-length",
        _score("score.input={tmp}/in", write_input=_short_features),
        needs_model=True,
        error=r"^scoring input: 'features' arrays have 3 values, but the model expects 4 \(input shape \[4\]\); "
        r"score data prepared like the model's dataset",
    ),
    Case(
        "score-one-short-row",
        _score("score.input={tmp}/in", write_input=_one_short_row),
        needs_model=True,
        error=r"^scoring input: row with _row_id=\d+ has 3 features values but the model expects 4 "
        r"\(input shape \[4\]\); fix or remove that row, or score data prepared like the model's dataset '.*'$",
    ),
    Case(
        "score-truncated-parquet-file",
        _score("score.input={tmp}/in", write_input=_cut_last_file),
        needs_model=True,
        error=rf"^score.input '.*in': cannot read 'file:.*/in/part-.*.parquet' \({UNREADABLE_PARQUET}\); the "
        r"file is truncated or not Parquet: write it again or remove it from score.input$",
    ),
    Case(
        "score-output-is-not-predictions",
        _score(output_exists=True),
        needs_model=True,
        kept=(OUT,),
        error=r"^score.output '.*out' already exists and holds no predictions \(no _metrics.json\); choose another "
        r"score.output or remove it$",
    ),
]


@pytest.fixture(scope="module")
def model_root(spark, tmp_path_factory) -> Path:
    """A small prepared dataset (4 features, 2 classes, 4 shards) and a model artifact written for it."""
    import torch

    from sparkml_par.models.registry import build_from_spec
    from sparkml_par.train.artifact import write_model_artifact
    from sparkml_par.train.job import build_train_job

    root = tmp_path_factory.mktemp("model")
    cfg = load_config(
        None,
        [
            f"data.output={root}/dataset",
            f"train.output={root}/train",
            "data.source=synthetic",
            "data.synthetic.rows=160",
            "data.synthetic.features=4",
            "data.synthetic.classes=2",
            "data.max_shards=4",
            "train.model_args={hidden: [4]}",
        ],
    )
    manifest = prepare(spark, cfg.data).manifest
    job = build_train_job(manifest, f"file://{root}/dataset", cfg, 1)
    torch.manual_seed(0)
    write_model_artifact(
        root / "train" / "model", build_from_spec(job.model_spec).state_dict(), job.description, {}, cfg.to_yaml()
    )
    return root


def _outputs(tmp: Path) -> list[str]:
    """The output and every sibling named after it (staging `out.tmp-*`, `out.rejected`, hidden `.out-*`)."""
    return sorted(p.name for p in tmp.iterdir() if p.name.lstrip(".").startswith(OUT))


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(spark, tmp_path, request, case):
    """Each bad input is refused clearly or quarantined exactly, and leaves no partial output behind."""
    model = request.getfixturevalue("model_root") if case.needs_model else None
    action = case.arrange(spark, tmp_path, model)
    before = _tree(tmp_path / OUT)

    if case.error is not None:
        with pytest.raises(SparkmlParError) as caught:
            action()
        assert re.search(case.error, str(caught.value)), f"message was: {caught.value}"
        assert _outputs(tmp_path) == sorted(case.kept)
        assert _tree(tmp_path / OUT) == before  # an output that was there is untouched
        return

    result = action()
    quarantine = spark.read.parquet(f"{result.output}/quarantine")
    expected_rows = sum(case.quarantined.values())
    assert result.manifest["quarantine"] == {
        "path": "quarantine",
        "rows": expected_rows,
        "reasons": dict(sorted(case.quarantined.items())),
    }
    assert collections.Counter(r["_reject_reason"] for r in quarantine.collect()) == case.quarantined
    assert result.manifest["rows_clean"] == result.manifest["rows_in"] - expected_rows > 0
    assert json.loads((tmp_path / OUT / "_manifest.json").read_text()) == result.manifest
    assert _outputs(tmp_path) == [OUT]
