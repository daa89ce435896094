"""The run report, built from stage outputs written here as plain files: no Spark session needed.

The Databricks notebook test (tests/test_databricks_notebook.py) builds one from real stage outputs.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparkml_par import report
from sparkml_par.config import load_config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class ReportPage(HTMLParser):
    """The parts of the page the tests look at: images, sections (id -> class) and the visible text."""

    def __init__(self, text: str):
        super().__init__()
        self.images: list[str] = []
        self.sections: dict[str, str] = {}
        self.chunks: list[str] = []
        self.links: list[str] = []
        self.feed(text)
        self.text = " ".join(" ".join(self.chunks).split())

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs["src"])
        elif tag == "section":
            self.sections[attrs["id"]] = attrs.get("class", "")
        elif tag in ("link", "script"):
            self.links.append(tag)

    def handle_data(self, data):
        self.chunks.append(data)

    def section_text(self, raw: str, anchor: str) -> str:
        start = raw.index(f'<section id="{anchor}"')
        return raw[start : raw.index("</section>", start)]


def check_images(page: ReportPage, directory: Path) -> set[str]:
    """Every <img> names a PNG file beside the page: magic bytes and a non-empty picture."""
    from PIL import Image

    for src in page.images:
        assert "/" not in src and "://" not in src, src  # beside the page, never an external asset
        path = directory / src
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000, src
        with Image.open(path) as image:
            assert image.format == "PNG" and min(image.size) > 100, (src, image.size)
    return set(page.images)


def _config(root: Path, *overrides: str):
    return load_config(
        None,
        [
            f"data.output={root / 'dataset'}",
            f"train.output={root / 'model'}",
            f"tune.output={root / 'tune'}",
            f"score.output={root / 'predictions'}",
            f"output.run_dir={root / 'run'}",
            *overrides,
        ],
    )


def _write_json(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))


def _write_dataset(root: Path, task: str = "classification") -> None:
    _write_json(
        root / "dataset" / "_manifest.json",
        {
            "source": "synthetic",
            "task": task,
            "num_classes": 3 if task == "classification" else 0,
            "feature_shape": [4],
            "rows_in": 1234,
            "rows_clean": 1200,
            "duplicates": 2,
            "quarantine": {"path": "quarantine", "rows": 34, "reasons": {"null:f0": 30, "out_of_range:f1": 4}},
            "splits": {
                "train": {"rows": 960, "row_groups": 4},
                "validation": {"rows": 120, "row_groups": 2},
                "test": {"rows": 120, "row_groups": 2},
            },
            "profile": "profile.json",
        },
    )
    _write_json(
        root / "dataset" / "profile.json",
        {
            "rows": 1200,
            "duplicates": 2,
            "deduplicated": False,
            "columns": {
                "label": {"nulls": 0, "min": 0, "max": 2, "mean": 0.98, "stddev": 0.8, "distinct": 3},
                "f0": {"nulls": 0, "min": -3.25, "max": 4.5, "mean": 0.0123, "stddev": 1.01, "distinct": 1187},
            },
            "label_distribution": {"0": 401, "1": 398, "2": 401},
        },
    )


def _write_training(root: Path, task: str = "classification") -> None:
    metric = "accuracy" if task == "classification" else "mae"
    history = [
        {
            "epoch": e,
            "train_loss": 1.0 / e,
            f"train_{metric}": 0.5 + 0.1 * e,
            "val_loss": 1.1 / e,
            f"val_{metric}": 0.45 + 0.1 * e,
            "lr": 0.001 * 0.5 ** (e - 1),
            "epoch_time": 2.0,
            "samples_per_sec": 480.0 + e,
            "step": 15 * e,
        }
        for e in (1, 2, 3)
    ]
    history[1]["interruptions"] = [
        {
            "reason": "lost",
            "at": 1.0,
            "epoch": 2,
            "ranks_before": 3,
            "ranks_after": 2,
            "checkpoint": "ckpt/checkpoint-00001-000005.pt",
            "steps_repeated": 4,
            "seconds_to_training": 17.25,
        }
    ]
    (root / "model").mkdir(parents=True, exist_ok=True)
    (root / "model" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
    _write_json(
        root / "model" / "model" / "metrics.json",
        {"history": history, "test": {"loss": 0.3456, metric: 0.8765}, "stopped_early": False},
    )
    _write_json(root / "model" / "model" / "model.json", {"task": task, "label_column": "target"})


def _write_tuning(root: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    trials = [
        {"number": 0, "status": "complete", "score": 0.52, "duration_s": 3.0, "params": {"train.lr": 0.01}},
        {"number": 1, "status": "complete", "score": 0.41, "duration_s": 2.5, "params": {"train.lr": 0.003}},
        {"number": 2, "status": "failed", "score": None, "duration_s": 0.4, "params": {"train.lr": 0.9}},
    ]
    _write_json(root / "tune" / "trials.json", trials)
    figure = Figure(figsize=(4, 3))
    FigureCanvasAgg(figure)
    figure.add_subplot().plot([0, 1], [0.52, 0.41], "o")
    figure.savefig(root / "tune" / "scores.png")


def _write_classification_predictions(root: Path) -> None:
    _write_json(
        root / "predictions" / "_metrics.json",
        {
            "model": str(root / "model" / "model"),
            "input": "dataset/test",
            "rows": 120,
            "task": "classification",
            "seconds": 1.5,
            "metrics": {
                "rows_evaluated": 120,
                "rows_unlabelled": 0,
                "labels_invalid": 0,
                "accuracy": 0.8917,
                "precision": [0.9, 0.85, None],
                "recall": [0.95, 0.8, 0.0],
                "confusion_matrix": [[38, 2, 0], [5, 34, 1], [10, 30, 0]],
            },
        },
    )


def _write_regression_predictions(root: Path, rows: int) -> None:
    rng = np.random.default_rng(1)
    labels = rng.normal(size=rows)
    predictions = labels + rng.normal(scale=0.1, size=rows)
    directory = root / "predictions"
    directory.mkdir(parents=True)
    half = rows // 2  # two part files, as Spark writes them
    for i, part in enumerate((slice(0, half), slice(half, rows))):
        pq.write_table(
            pa.table(
                {
                    "_row_id": np.arange(rows)[part],
                    "target": labels[part],
                    "prediction": predictions[part].astype(np.float32),
                }
            ),
            directory / f"part-0000{i}.parquet",
        )
    _write_json(
        directory / "_metrics.json",
        {
            "model": str(root / "model" / "model"),
            "rows": rows,
            "task": "regression",
            "seconds": 0.5,
            "metrics": {"rows_evaluated": rows, "rows_unlabelled": 0, "mse": 0.01002, "mae": 0.07981},
        },
    )


def test_classification_run_shows_every_section_with_valid_plots(tmp_path):
    _write_dataset(tmp_path)
    _write_training(tmp_path)
    _write_tuning(tmp_path)
    _write_classification_predictions(tmp_path)
    cfg = _config(tmp_path, "spark.app_name=<demo & co>")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(cfg.to_yaml())
    _write_json(
        run_dir / "stages.json",
        {"prepare": {"fingerprint": "a", "output": "ds", "seconds": 12.5, "summary": {"skipped": True}}},
    )

    index = report.write_report(run_dir, cfg)

    assert index == run_dir / "report" / "index.html"
    raw = index.read_text()
    page = ReportPage(raw)
    assert page.links == []  # no stylesheet or script to fetch
    assert page.sections == {"stages": "", "data": "", "training": "", "tuning": "", "scoring": "", "config": ""}
    assert check_images(page, index.parent) == {
        "training_curves.png",
        "throughput.png",
        "learning_rate.png",
        "tuning_scores.png",
        "confusion_matrix.png",
    }
    assert sorted(p.name for p in index.parent.iterdir()) == sorted([*page.images, "index.html"])
    data = page.section_text(raw, "data")
    for shown in ("1234", "1200", "null:f0", ">30<", "out_of_range:f1", ">4<", "960", "-3.25", "0.0123", "401"):
        assert shown in data, shown
    training = page.section_text(raw, "training")
    assert "epochs run: 3" in training and "0.8765" in training and "0.3456" in training and "483" in training
    resized = training.split("Resizes and preemptions", 1)[1]
    for shown in ("<td>lost</td><td>3</td><td>2</td><td>4</td><td>17.25</td>", "checkpoint-00001-000005.pt"):
        assert shown in resized, shown
    tuning = page.section_text(raw, "tuning")
    assert "best: trial 1, val_loss=0.41 (train.lr=0.003)" in tuning and "failed" in tuning
    scoring = page.section_text(raw, "scoring")
    assert "0.8917" in scoring and "0.95" in scoring and "<td>40</td>" in scoring  # class 2 support: 10 + 30 + 0
    assert ">12.5<" in page.section_text(raw, "stages")
    assert "app_name: &lt;demo &amp; co&gt;" in raw and "<demo" not in raw
    assert "not run" not in page.text


def test_regression_run_plots_residuals_of_a_sample(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "PREDICTION_SAMPLE", 500)
    _write_dataset(tmp_path, "regression")
    _write_training(tmp_path, "regression")
    _write_regression_predictions(tmp_path, rows=1300)

    index = report.write_report(tmp_path / "run", _config(tmp_path, "data.task=regression"))

    raw = index.read_text()
    page = ReportPage(raw)
    assert check_images(page, index.parent) == {
        "training_curves.png",
        "throughput.png",
        "learning_rate.png",
        "residuals.png",
    }
    scoring = page.section_text(raw, "scoring")
    assert "0.01002" in scoring and "0.07981" in scoring and "residual plot of 500 sampled rows" in scoring
    assert "confusion" not in raw
    assert page.sections["tuning"] == "not-run"
    sample = report._prediction_sample(tmp_path / "predictions", "target")
    assert len(sample[0]) == 500 and np.abs(sample[0] - sample[1]).max() < 1.0  # labels paired with their rows


def test_absent_inputs_are_reported_as_not_run_and_old_plots_removed(tmp_path):
    _write_dataset(tmp_path)
    _write_training(tmp_path)
    cfg = _config(tmp_path)
    report.write_report(tmp_path / "run", cfg)
    assert (tmp_path / "run" / "report" / "training_curves.png").exists()

    (tmp_path / "model" / "metrics.jsonl").unlink()
    (tmp_path / "model" / "model" / "metrics.json").unlink()
    index = report.write_report(tmp_path / "run", cfg)

    raw = index.read_text()
    page = ReportPage(raw)
    assert page.images == [] and list(index.parent.glob("*.png")) == []
    assert page.sections == {
        "stages": "not-run",
        "data": "",
        "training": "not-run",
        "tuning": "not-run",
        "scoring": "not-run",
        "config": "",
    }
    assert f"not run: no training metrics (metrics.jsonl) at {tmp_path / 'model'}" in page.text
    assert f"not run: no predictions (_metrics.json) at {tmp_path / 'predictions'}" in page.text
    assert "no config.yaml in the run directory" in page.text and "rows_in" not in page.text


def test_remote_outputs_are_named_not_read(tmp_path):
    cfg = _config(tmp_path, "data.output=hdfs:///datasets/digits")
    page = ReportPage(report.write_report(tmp_path / "run", cfg).read_text())
    assert "dataset (_manifest.json) 'hdfs:///datasets/digits' is not a local or mounted path" in page.text
    assert report.readable_path("dbfs:/runs/a") == Path("/dbfs/runs/a")
    assert report.readable_path("file:///tmp/x") == Path("/tmp/x")
    assert report.readable_path("s3://bucket/predictions") is None


def test_report_command_prints_the_page_path(tmp_path, capsys):
    _write_dataset(tmp_path)
    assert report.run(_config(tmp_path)) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == str(tmp_path / "run" / "report" / "index.html") and Path(printed).is_file()


@pytest.mark.parametrize("value, shown", [(0.123456, "0.1235"), (None, "n/a"), (True, "true"), ([1, 2], "[1, 2]")])
def test_values_are_formatted_for_reading(value, shown):
    assert report._fmt(value) == shown
