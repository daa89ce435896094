"""Every config in conf/ runs end to end, and `sparkml-par run` re-runs exactly what an edit changed.

The configs run as shipped, with outputs moved under the test's directory and fewer epochs and trials;
gpu_cluster.yaml also has its machine-specific keys (GPUs, fp16, cluster paths) replaced by this machine's.
"""

from __future__ import annotations

import json
from pathlib import Path

import foreign_data
import pytest
from run_settings import outputs_under

from sparkml_par.config import load_config
from sparkml_par.errors import SparkmlParError
from sparkml_par.pipeline import run_pipeline

CONF = Path(__file__).parents[1] / "conf"


def _ran(records) -> list[str]:
    return [name for name, record in records.items() if not record.summary.get("skipped")]


def _customers_csv(path: Path, n: int = 300) -> Path:
    """The CSV conf/tabular.yaml expects: customers with a churned label, a few missing spends."""
    lines = ["customer_id,age,monthly_spend,tenure_months,plan,region,churned"]
    for i in range(n):
        spend = "" if i % 25 == 0 else f"{5 + (i * 37) % 190:.2f}"
        churned = int(i % 36 < 6 or (i * 37) % 190 > 170)
        lines.append(
            f"c{i},{20 + i % 50},{spend},{i % 36},{['basic', 'plus', 'premium'][i % 3]},"
            f"{['north', 'south'][i % 2]},{churned}"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def tabular(tmp_path_factory):
    root = tmp_path_factory.mktemp("tabular")
    csv = _customers_csv(root / "customers.csv")

    def config(*overrides: str):
        return load_config(
            CONF / "tabular.yaml", [f"data.path={csv}", *outputs_under(root / "run"), "train.epochs=2", *overrides]
        )

    return root, csv, config


@pytest.mark.slow
def test_tabular_config_runs_with_its_churned_label(spark, tabular):
    root, _, config = tabular
    records = run_pipeline(spark, config())
    assert _ran(records) == ["prepare", "train", "score", "report"]
    manifest = json.loads((root / "run" / "dataset" / "_manifest.json").read_text())
    assert manifest["label_column"] == "churned" and manifest["classes"] is None and manifest["num_classes"] == 2
    assert records["score"].summary["metrics"]["rows_evaluated"] == manifest["splits"]["test"]["rows"]


@pytest.mark.slow
def test_an_edited_input_value_re_prepares_retrains_and_rescores(spark, tabular):
    root, csv, config = tabular
    before = json.loads((root / "run" / "dataset" / "_manifest.json").read_text())["fingerprint"]
    csv.write_text(csv.read_text().replace("c7,27,", "c7,28,", 1))
    records = run_pipeline(spark, config())
    assert _ran(records) == ["prepare", "train", "score", "report"]
    after = json.loads((root / "run" / "dataset" / "_manifest.json").read_text())
    assert after["fingerprint"] != before and after["owner"] == str(root / "run")


@pytest.mark.slow
def test_a_changed_data_setting_re_prepares_retrains_and_rescores(spark, tabular):
    _, _, config = tabular
    records = run_pipeline(spark, config("data.featurize.scale=false"))
    assert _ran(records) == ["prepare", "train", "score", "report"]


@pytest.mark.slow
def test_a_changed_score_setting_rescores_only(spark, tabular):
    _, _, config = tabular
    records = run_pipeline(spark, config("data.featurize.scale=false", "score.batch_size=7"))
    assert _ran(records) == ["score", "report"]


def test_a_dataset_another_config_wrote_stays_protected(spark, tabular):
    root, _, config = tabular
    other = config(
        "data.featurize.scale=true",
        f"output.run_dir={root}/other",
        f"train.output={root}/other/model",
        f"score.output={root}/other/predictions",
    )
    with pytest.raises(
        SparkmlParError,
        match=r"already holds a dataset built from a different config or input "
        r"\(fingerprint '\w+', created '.*' by the pipeline of run directory "
        r"'.*/run'; .*`sparkml-par run` replaces only datasets its own run "
        r"directory \('.*/other'\) wrote",
    ):
        run_pipeline(spark, other)


@pytest.mark.slow
def test_quickstart_and_tune_configs_run_on_their_digits(spark, tmp_path):
    quick = run_pipeline(
        spark, load_config(CONF / "quickstart.yaml", [*outputs_under(tmp_path / "quick"), "train.epochs=1"])
    )
    assert _ran(quick) == ["prepare", "train", "score", "report"]
    assert quick["score"].summary["metrics"]["accuracy"] > 0.5
    tuned = run_pipeline(
        spark, load_config(CONF / "tune.yaml", [*outputs_under(tmp_path / "tune"), "tune.trials=2", "train.epochs=1"])
    )
    assert _ran(tuned) == ["prepare", "tune", "train", "score", "report"]
    assert tuned["tune"].summary["trials"] == 2 and (tmp_path / "tune" / "tune" / "best.yaml").is_file()


@pytest.mark.slow
def test_gpu_cluster_template_runs_with_this_machines_settings(spark, tmp_path):
    df = foreign_data.frame("breast_cancer").drop(columns=["patient id"]).rename(columns={"diagnosis": "label"})
    path = foreign_data.write(df, tmp_path / "raw", "parquet")
    cfg = load_config(
        CONF / "gpu_cluster.yaml",
        [
            "spark.master=local[2]",
            "spark.use_gpu=false",
            f"data.path={path}",
            *outputs_under(tmp_path / "run"),
            "train.precision=fp32",
            "train.epochs=1",
            "train.batch_size=64",
        ],
    )
    records = run_pipeline(spark, cfg)
    assert _ran(records) == ["prepare", "train", "score", "report"]
    assert records["score"].summary["metrics"]["rows_evaluated"] > 0
