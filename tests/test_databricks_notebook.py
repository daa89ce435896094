"""jobs/databricks_notebook.py runs cell by cell, as Databricks runs it, on an existing session.

The cells are exec'ed in order in one namespace that already holds `spark` (the test session, as a
notebook's would) and the variables the notebook would otherwise read from its widgets. A tiny
synthetic dataset keeps the whole run (prepare, 2-rank barrier training, scoring, report) short.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from run_settings import tiny_job

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "jobs" / "databricks_notebook.py"
SEPARATOR = "# COMMAND ----------"

FAST = [*tiny_job(rows=300, epochs=1), "train.model_args={hidden: [16]}"]


def notebook_cells() -> list[str]:
    source = NOTEBOOK.read_text()
    assert source.startswith("# Databricks notebook source\n")
    return [cell.strip() for cell in source.split(SEPARATOR)]


class _Images(HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.sources: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])


def test_cells_prepare_train_score_and_report_on_the_given_session(spark, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    cells = notebook_cells()
    assert len(cells) == 7 and all(line.startswith("# MAGIC") for line in cells[0].splitlines()[1:])
    namespace = {"spark": spark, "OUTPUT_ROOT": str(tmp_path / "run"), "OVERRIDES": FAST}

    for cell in cells:
        exec(compile(cell, str(NOTEBOOK), "exec"), namespace)

    assert not spark.sparkContext._jsc.sc().isStopped()  # the notebook's session is never stopped
    cfg = namespace["cfg"]
    assert (cfg.data.synthetic.rows, cfg.train.model, cfg.train.launcher) == (300, "mlp", "barrier")
    run = tmp_path / "run"
    manifest = json.loads((run / "dataset" / "_manifest.json").read_text())
    assert manifest["rows_clean"] == 300

    trained = namespace["trained"]
    assert trained.epochs_run == 1 and Path(trained.artifact) == run / "model" / "model"
    assert (run / "model" / "model" / "weights.pt").stat().st_size > 0
    assert len((run / "model" / "metrics.jsonl").read_text().splitlines()) == 1

    test_rows = manifest["splits"]["test"]["rows"]
    predictions = ds.dataset(str(run / "predictions"), format="parquet").to_table()
    assert predictions.num_rows == test_rows > 0
    assert set(predictions.column("prediction").to_pylist()) <= {0, 1, 2}
    metrics = json.loads((run / "predictions" / "_metrics.json").read_text())["metrics"]
    assert metrics["rows_evaluated"] == test_rows and 0.0 <= metrics["accuracy"] <= 1.0

    # The report, from the real outputs of every stage.
    report = namespace["report_path"]
    assert report == run / "report" / "index.html"
    page = report.read_text()
    images = _Images(page).sources
    assert set(images) == {"training_curves.png", "throughput.png", "learning_rate.png", "confusion_matrix.png"}
    for name in images:
        data = (report.parent / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
    assert f"{manifest['rows_in']}" in page and f"{metrics['accuracy']:.4g}" in page
    assert (run / "config.yaml").read_text() == cfg.to_yaml()
    assert f"report {report}" in capsys.readouterr().out
