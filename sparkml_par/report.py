"""The run report: one HTML page, `run_dir/report/index.html`, built from what the stages wrote.

Every input is found through the config (data.output, train.output, tune.output, score.output) and
read with plain file I/O, so the report needs no Spark session. A section whose inputs are absent says
"not run" instead of failing: the report of a run that stopped after prepare still shows the data.
The page holds its own CSS and no script; its plots are PNG files beside it, drawn with matplotlib's
Agg canvas. Predictions are read with pyarrow, at most PREDICTION_SAMPLE rows of them.
"""

from __future__ import annotations

import html
import json
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Optional

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from sparkml_par.config import Config
from sparkml_par.contract import (
    MANIFEST,
    MANIFEST_CATEGORIES,
    MANIFEST_CLASS_COUNTS,
    MANIFEST_CLASS_WARNINGS,
    MANIFEST_CLASSES,
    MANIFEST_CREATED,
    MANIFEST_DUPLICATES,
    MANIFEST_FEATURE_SHAPE,
    MANIFEST_LEFT_OUT,
    MANIFEST_NUM_CLASSES,
    MANIFEST_PROFILE,
    MANIFEST_QUARANTINE,
    MANIFEST_ROWS_CLEAN,
    MANIFEST_ROWS_IN,
    MANIFEST_SOURCE,
    MANIFEST_SPLITS,
    MANIFEST_TASK,
    MODEL_DESCRIPTION,
    MODEL_DIR,
    MODEL_METRICS,
    PREDICTION,
    PROFILE,
    SCORE_METRICS,
    TRAIN_METRICS,
)
from sparkml_par.errors import SparkmlParError
from sparkml_par.io import local_files
from sparkml_par.io.store import Store, WorkingCopy, is_local, local_path
from sparkml_par.stage import Run, Stage, always_due, fingerprint

log = logging.getLogger("sparkml_par.report")

REPORT_DIR = "report"
INDEX = "index.html"
PREDICTION_SAMPLE = 10_000
NOT_RUN = "not run"

_TUNE_PLOT = "scores.png"


@dataclass
class Section:
    """One part of the page: a title and its HTML body; ran is False when its inputs were absent."""

    anchor: str
    title: str
    body: str
    ran: bool = True


@dataclass
class _Plots:
    """Writes the PNG files of one report and remembers their names."""

    directory: Path
    written: list[str] = field(default_factory=list)

    def new_figure(self, width: float = 7.0, height: float = 4.0):
        figure = Figure(figsize=(width, height), dpi=100)
        FigureCanvasAgg(figure)  # draws without a display, whatever matplotlib's global backend is
        return figure

    def save(self, figure, name: str) -> str:
        figure.tight_layout()
        with local_files.atomic_path(self.directory / name) as temp:
            figure.savefig(temp, format="png")
        self.written.append(name)
        return name

    def write(self, data: bytes, name: str) -> str:
        with local_files.atomic_path(self.directory / name) as temp:
            temp.write_bytes(data)
        self.written.append(name)
        return name


def write_report(run_dir: str | os.PathLike, cfg: Config) -> Path:
    """Builds run_dir/report/index.html (and its PNG plots) from the stage outputs cfg points at."""
    run_path = Path(run_dir).absolute()
    out = run_path / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    plots = _Plots(out)
    sections = [
        _stages_section(run_path),
        _data_section(cfg),
        _training_section(cfg, plots),
        _tuning_section(cfg, plots),
        _scoring_section(cfg, plots),
        _config_section(run_path, cfg),
    ]
    _remove_stale_plots(out, plots.written)
    index = out / INDEX
    local_files.write_text(index, _page(run_path, sections))
    missing = [s.title for s in sections if not s.ran]
    log.info("report %s (%d plots%s)", index, len(plots.written), f"; not run: {', '.join(missing)}" if missing else "")
    return index


def run(cfg: Config) -> int:
    """Entry point of `sparkml-par report`: the report of output.run_dir; prints its path."""
    run_dir = WorkingCopy(cfg.output.run_dir)
    try:
        write_report(run_dir.dir, cfg)
    finally:
        run_dir.close()
    print(run_dir.url(f"{REPORT_DIR}/{INDEX}"))
    return 0


# ---------------------------------------------------------------------------------------------- inputs


def readable_path(url: str) -> Optional[Path]:
    """The local (or mounted) path of a stage output Spark wrote; None for a remote filesystem the report
    does not read."""
    return local_path(url) if is_local(url) else None


def _read_json(path: Optional[Path]) -> Optional[Any]:
    if path is None or not path.is_file():
        return None
    return json.loads(path.read_text())


def _stored(url: str, name: str) -> Optional[bytes]:
    """A file of an output the project writes itself (train.output, tune.output): through sparkml_par.io.store,
    wherever it is; None when it is not there."""
    try:
        return Store(url).read_bytes(name)
    except (OSError, SparkmlParError):
        return None


def _stored_json(url: str, name: str) -> Optional[Any]:
    data = _stored(url, name)
    return None if data is None else json.loads(data)


def _under(url: str, *parts: str) -> Optional[Path]:
    root = readable_path(url)
    return None if root is None else root.joinpath(*parts)


def _absent(url: str, what: str) -> str:
    """Why a section has nothing to show: the stage did not run there, or the output is not readable here."""
    if readable_path(url) is None:
        return f"{what} {url!r} is not a local or mounted path; the report reads stage outputs with plain file I/O."
    return f"{NOT_RUN}: no {what} at {url}."


# -------------------------------------------------------------------------------------------- sections


def _stages_section(run_dir: Path) -> Section:
    stages = _read_json(run_dir / "stages.json")
    if not stages:
        return Section(
            "stages",
            "Stages",
            _p(f"{NOT_RUN}: no stages.json in {run_dir} (stages were run one by one, not by `sparkml-par run`)."),
            ran=False,
        )
    rows = [
        (name, _fmt(r.get("seconds")), "yes" if (r.get("summary") or {}).get("skipped") else "no", r.get("output"))
        for name, r in stages.items()
    ]
    return Section("stages", "Stages", _table(["stage", "seconds", "skipped", "output"], rows))


def _data_section(cfg: Config) -> Section:
    manifest = _read_json(_under(cfg.data.output, MANIFEST))
    if manifest is None:
        return Section("data", "Data", _p(_absent(cfg.data.output, "dataset (_manifest.json)")), ran=False)
    quarantine = manifest.get(MANIFEST_QUARANTINE, {})
    facts = [
        ("dataset", cfg.data.output),
        ("source", manifest.get(MANIFEST_SOURCE)),
        ("task", manifest.get(MANIFEST_TASK)),
        ("classes", manifest.get(MANIFEST_NUM_CLASSES)),
        ("feature shape", manifest.get(MANIFEST_FEATURE_SHAPE)),
        ("rows in", manifest.get(MANIFEST_ROWS_IN)),
        ("rows clean", manifest.get(MANIFEST_ROWS_CLEAN)),
        ("rows quarantined", quarantine.get("rows")),
        ("duplicates", manifest.get(MANIFEST_DUPLICATES)),
        ("created", manifest.get(MANIFEST_CREATED)),
    ]
    parts = [_table(["", "value"], facts)]
    names = manifest.get(MANIFEST_CLASSES)
    counts = manifest.get(MANIFEST_CLASS_COUNTS) or {}
    if counts:
        parts.append(
            "<h3>Classes</h3>"
            + _table(
                ["class id", "label", "rows"],
                [(k, names[int(k)] if names and int(k) < len(names) else k, n) for k, n in counts.items()],
            )
        )
    parts += [_p(f"warning: {w}") for w in manifest.get(MANIFEST_CLASS_WARNINGS) or []]
    splits = manifest.get(MANIFEST_SPLITS, {})
    parts.append(
        "<h3>Splits</h3>"
        + _table(["split", "rows", "row groups"], [(n, s.get("rows"), s.get("row_groups")) for n, s in splits.items()])
    )
    categories = manifest.get(MANIFEST_CATEGORIES) or {}
    if categories:
        parts.append(
            "<h3>Text columns</h3>"
            + _table(
                ["column", "distinct in train", "kept as categories", "read as <other>"],
                [(name, c["distinct"], c["kept"], c["distinct"] - c["kept"]) for name, c in categories.items()],
            )
        )
    left_out = manifest.get(MANIFEST_LEFT_OUT) or {}
    if left_out:
        parts.append("<h3>Columns left out</h3>" + _table(["column", "why"], list(left_out.items())))
    reasons = quarantine.get("reasons") or {}
    parts.append(
        "<h3>Quarantine</h3>"
        + (
            _table(["reason", "rows"], sorted(reasons.items(), key=lambda kv: -kv[1]))
            if reasons
            else _p(f"no rows quarantined ({quarantine.get('rows', 0)} rows)")
        )
    )
    profile = _read_json(_under(cfg.data.output, manifest.get(MANIFEST_PROFILE) or PROFILE))
    parts.append("<h3>Profile</h3>" + (_profile_html(profile) if profile else _p(f"{NOT_RUN}: no {PROFILE}")))
    return Section("data", "Data", "\n".join(parts))


def _profile_html(profile: dict[str, Any]) -> str:
    stats = ("nulls", "min", "max", "mean", "stddev", "distinct")
    columns = profile.get("columns", {})
    parts = [_p(f"{profile.get('rows')} clean rows profiled")]
    parts.append(_table(["column", *stats], [(name, *(_fmt(c.get(s)) for s in stats)) for name, c in columns.items()]))
    labels = profile.get("label_distribution")
    if labels:
        parts.append("<h4>Label distribution</h4>" + _table(["label", "rows"], list(labels.items())))
    return "\n".join(parts)


def _training_section(cfg: Config, plots: _Plots) -> Section:
    lines = (_stored(cfg.train.output, TRAIN_METRICS) or b"").decode().splitlines()
    history = [json.loads(line) for line in lines if line.strip()]
    model_metrics = _stored_json(f"{cfg.train.output.rstrip('/')}/{MODEL_DIR}", MODEL_METRICS) or {}
    history = history or model_metrics.get("history", [])
    if not history:
        return Section(
            "training",
            "Training",
            _p(f"{NOT_RUN}: no training metrics ({TRAIN_METRICS}) at {cfg.train.output}."),
            ran=False,
        )
    parts = [
        _p(
            f"epochs run: {len(history)}, in {cfg.train.output}"
            + (" (stopped early)" if model_metrics.get("stopped_early") else "")
        )
    ]
    parts.append(_img(_plot_curves(history, plots), "loss and metric per epoch, train and validation"))
    if any("samples_per_sec" in r for r in history):
        parts.append(
            _img(
                _plot_series(
                    history, "samples_per_sec", "samples/s", "Training throughput per epoch", "throughput.png", plots
                ),
                "training samples per second per epoch",
            )
        )
    if any("lr" in r for r in history):
        parts.append(
            _img(
                _plot_series(history, "lr", "learning rate", "Learning-rate schedule", "learning_rate.png", plots),
                "learning rate per epoch",
            )
        )
    keys = [k for k in dict.fromkeys(k for r in history for k in r) if k != "interruptions"]
    parts.append("<h3>Per epoch</h3>" + _table(keys, [[_fmt(r.get(k)) for k in keys] for r in history]))
    events = [event for r in history for event in r.get("interruptions", [])]
    if events:
        columns = [
            "epoch",
            "reason",
            "ranks_before",
            "ranks_after",
            "steps_repeated",
            "seconds_to_training",
            "checkpoint",
        ]
        parts.append(
            "<h3>Resizes and preemptions</h3>"
            + _p("Training stopped at a checkpoint and went on from it, on these ranks.")
            + _table(columns, [[_fmt(e.get(k)) for k in columns] for e in events])
        )
    test = model_metrics.get("test") or {}
    parts.append(
        "<h3>Test split (at the end of training)</h3>"
        + (
            _table(["metric", "value"], [(k, _fmt(v)) for k, v in test.items()])
            if test
            else _p(f"{NOT_RUN}: no test metrics in {cfg.train.output}/{MODEL_DIR}/{MODEL_METRICS}")
        )
    )
    return Section("training", "Training", "\n".join(parts))


def _curve_metric(history: list[dict[str, Any]]) -> Optional[str]:
    """The second curve: accuracy for classification, MAE (then MSE) for regression."""
    for name in ("accuracy", "mae", "mse"):
        if any(f"train_{name}" in r or f"val_{name}" in r for r in history):
            return name
    return None


def _plot_curves(history: list[dict[str, Any]], plots: _Plots) -> str:
    metric = _curve_metric(history)
    names = ["loss"] + ([metric] if metric else [])
    figure = plots.new_figure(width=5.0 * len(names), height=4.0)
    for i, name in enumerate(names):
        axes = figure.add_subplot(1, len(names), i + 1)
        for prefix, label, style in (("train_", "train", "o-"), ("val_", "validation", "s--")):
            points = [(r["epoch"], r[prefix + name]) for r in history if r.get(prefix + name) is not None]
            if points:
                axes.plot(*zip(*points), style, label=label)
        _epoch_axis(axes)
        axes.set_ylabel(name)
        axes.set_title(f"{name} per epoch")
        axes.grid(alpha=0.3)
        axes.legend(loc="best")
    return plots.save(figure, "training_curves.png")


def _plot_series(history: list[dict[str, Any]], key: str, ylabel: str, title: str, name: str, plots: _Plots) -> str:
    points = [(r["epoch"], r[key]) for r in history if r.get(key) is not None]
    figure = plots.new_figure()
    axes = figure.add_subplot()
    if points:
        axes.plot(*zip(*points), "o-")
    _epoch_axis(axes)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    return plots.save(figure, name)


def _epoch_axis(axes) -> None:
    axes.set_xlabel("epoch")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))


def _tuning_section(cfg: Config, plots: _Plots) -> Section:
    trials = _stored_json(cfg.tune.output, "trials.json")
    plot = _stored(cfg.tune.output, _TUNE_PLOT)
    if trials is None and plot is None:
        return Section("tuning", "Tuning", _p(f"{NOT_RUN}: no search (trials.json) at {cfg.tune.output}."), ran=False)
    parts = [_p(f"search in {cfg.tune.output}: {cfg.tune.metric} ({cfg.tune.direction})")]
    if plot is not None:
        parts.append(_img(plots.write(plot, "tuning_scores.png"), f"{cfg.tune.metric} by trial"))
    if trials:
        best = _best_trial(trials, cfg.tune.direction)
        if best is not None:
            params = ", ".join(f"{k}={v}" for k, v in best["params"].items())
            parts.append(_p(f"best: trial {best['number']}, {cfg.tune.metric}={_fmt(best['score'])} ({params})"))
        keys = list(dict.fromkeys(k for t in trials for k in t.get("params", {})))
        rows = [
            (
                t["number"],
                t["status"],
                _fmt(t.get("score")),
                *(_fmt(t["params"].get(k)) for k in keys),
                _fmt(t.get("duration_s")),
            )
            for t in trials
        ]
        parts.append(_table(["trial", "status", "score", *keys, "seconds"], rows))
    return Section("tuning", "Tuning", "\n".join(parts))


def _best_trial(trials: list[dict[str, Any]], direction: str) -> Optional[dict[str, Any]]:
    complete = [t for t in trials if t.get("status") == "complete" and t.get("score") is not None]
    if not complete:
        return None
    pick = min if direction == "minimize" else max
    return pick(complete, key=lambda t: t["score"])


def _scoring_section(cfg: Config, plots: _Plots) -> Section:
    scored = _read_json(_under(cfg.score.output, SCORE_METRICS))
    if scored is None:
        return Section("scoring", "Scoring", _p(_absent(cfg.score.output, f"predictions ({SCORE_METRICS})")), ran=False)
    facts = [
        ("predictions", cfg.score.output),
        ("model", scored.get("model")),
        ("input", scored.get("input")),
        ("rows", scored.get("rows")),
        ("seconds", _fmt(scored.get("seconds"))),
    ]
    parts = [_table(["", "value"], facts)]
    metrics = scored.get("metrics")
    if not metrics:
        parts.append(_p("the input had no label column: predictions were not evaluated"))
        return Section("scoring", "Scoring", "\n".join(parts))
    if "confusion_matrix" in metrics:
        parts.append(_classification_html(metrics, plots))
    else:
        parts.append(
            _table(
                ["metric", "value"],
                [
                    ("mse", _fmt(metrics.get("mse"))),
                    ("mae", _fmt(metrics.get("mae"))),
                    ("rows evaluated", metrics.get("rows_evaluated")),
                ],
            )
        )
        label = _label_column(cfg, scored)
        sample = _prediction_sample(readable_path(cfg.score.output), label)
        if sample is not None:
            parts.append(_img(_plot_residuals(*sample, plots), "residuals against predictions"))
            parts.append(_p(f"residual plot of {len(sample[0])} sampled rows (at most {PREDICTION_SAMPLE})"))
        else:
            parts.append(_p(f"no residual plot: the predictions hold no label column {label!r}"))
    return Section("scoring", "Scoring", "\n".join(parts))


def _classification_html(metrics: dict[str, Any], plots: _Plots) -> str:
    matrix = metrics["confusion_matrix"]
    parts = [
        _table(
            ["metric", "value"],
            [
                ("accuracy", _fmt(metrics.get("accuracy"))),
                ("rows evaluated", metrics.get("rows_evaluated")),
                ("rows unlabelled", metrics.get("rows_unlabelled")),
                ("labels that are no class", metrics.get("labels_invalid")),
            ],
        )
    ]
    rows = [
        (k, _fmt(p), _fmt(r), sum(matrix[k]) if k < len(matrix) else "")
        for k, (p, r) in enumerate(zip(metrics.get("precision", []), metrics.get("recall", [])))
    ]
    parts.append("<h3>Per class</h3>" + _table(["class", "precision", "recall", "support"], rows))
    if matrix:
        parts.append(
            "<h3>Confusion matrix</h3>"
            + _img(_plot_confusion(matrix, plots), "confusion matrix, rows: label, columns: prediction")
        )
    return "\n".join(parts)


def _plot_confusion(matrix: list[list[int]], plots: _Plots) -> str:
    n = len(matrix)
    size = min(10.0, 3.0 + 0.5 * n)
    figure = plots.new_figure(width=size + 1.0, height=size)
    axes = figure.add_subplot()
    image = axes.imshow(matrix, cmap="Blues")
    figure.colorbar(image, ax=axes)
    top = max((v for row in matrix for v in row), default=0)
    if n <= 20:  # numbers in the cells while they still fit
        for i, row in enumerate(matrix):
            for j, value in enumerate(row):
                axes.text(
                    j,
                    i,
                    str(value),
                    ha="center",
                    va="center",
                    color="white" if top and value > top / 2 else "black",
                    fontsize=8,
                )
    axes.set_xticks(range(n))
    axes.set_yticks(range(n))
    axes.set_xlabel("prediction")
    axes.set_ylabel("label")
    axes.set_title("Confusion matrix")
    return plots.save(figure, "confusion_matrix.png")


def _label_column(cfg: Config, scored: dict[str, Any]) -> str:
    """The label column of the predictions: the model's, else data.label."""
    model_dir = scored.get("model") or f"{cfg.train.output.rstrip('/')}/{MODEL_DIR}"
    description = _stored_json(str(model_dir), MODEL_DESCRIPTION) or {}
    return description.get("label_column") or cfg.data.label


def _prediction_sample(path: Optional[Path], label: str):
    """(labels, predictions) of at most PREDICTION_SAMPLE rows chosen with a fixed seed; None without labels."""
    import numpy as np
    import pyarrow.dataset as ds

    if path is None or not path.is_dir():
        return None
    dataset = ds.dataset(str(path), format="parquet")  # skips _metrics.json and other _-prefixed files
    if label not in dataset.schema.names or PREDICTION not in dataset.schema.names:
        return None
    rows = dataset.count_rows()
    if rows > PREDICTION_SAMPLE:
        indices = np.sort(np.random.default_rng(0).choice(rows, PREDICTION_SAMPLE, replace=False))
        table = dataset.take(indices, columns=[label, PREDICTION])
    else:
        table = dataset.to_table(columns=[label, PREDICTION])
    labels = table.column(label).to_numpy(zero_copy_only=False).astype(float)
    predictions = table.column(PREDICTION).to_numpy(zero_copy_only=False).astype(float)
    keep = ~np.isnan(labels)
    return labels[keep], predictions[keep]


def _plot_residuals(labels, predictions, plots: _Plots) -> str:
    figure = plots.new_figure(width=10.0, height=4.0)
    scatter = figure.add_subplot(1, 2, 1)
    scatter.scatter(predictions, labels - predictions, s=6, alpha=0.5)
    scatter.axhline(0.0, color="tab:red", linewidth=1)
    scatter.set_xlabel("prediction")
    scatter.set_ylabel("label - prediction")
    scatter.set_title("Residuals")
    scatter.grid(alpha=0.3)
    histogram = figure.add_subplot(1, 2, 2)
    histogram.hist(labels - predictions, bins=40)
    histogram.set_xlabel("label - prediction")
    histogram.set_ylabel("rows")
    histogram.set_title("Residual distribution")
    return plots.save(figure, "residuals.png")


def _config_section(run_dir: Path, cfg: Config) -> Section:
    saved = run_dir / "config.yaml"
    if saved.is_file():
        source, text = f"{saved}", saved.read_text()
    else:
        source, text = "the config the report was built with (no config.yaml in the run directory)", cfg.to_yaml()
    return Section("config", "Effective config", _p(source) + f"<pre>{html.escape(text)}</pre>")


# ------------------------------------------------------------------------------------------------ HTML

_CSS = """
body { font-family: sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { border-bottom: 2px solid #444; } h2 { margin-top: 2em; border-bottom: 1px solid #aaa; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f0f0f0; }
img { max-width: 100%; display: block; margin: 0.5em 0; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: 0.85em; }
.not-run { color: #888; font-style: italic; }
nav a { margin-right: 1em; }
"""


def _page(run_dir: Path, sections: list[Section]) -> str:
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    nav = " ".join(f'<a href="#{s.anchor}">{html.escape(s.title)}{"" if s.ran else " (not run)"}</a>' for s in sections)
    body = "\n".join(_section_html(s) for s in sections)
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>sparkml_par run {html.escape(run_dir.name)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<h1>sparkml_par run report</h1>\n{_p(f'run directory {run_dir}, report written {created}')}\n"
        f"<nav>{nav}</nav>\n{body}\n</body>\n</html>\n"
    )


def _section_html(section: Section) -> str:
    css_class = "" if section.ran else ' class="not-run"'
    return (
        f'<section id="{section.anchor}"{css_class}>\n<h2>{html.escape(section.title)}</h2>\n{section.body}\n</section>'
    )


def _table(header: Iterable[Any], rows: Iterable[Iterable[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>\n" for row in rows)
    return f"<table>\n<tr>{head}</tr>\n{body}</table>"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else _fmt(value)


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def _p(text: str) -> str:
    return f"<p>{html.escape(text)}</p>"


def _img(name: str, alt: str) -> str:
    return f'<img src="{html.escape(name)}" alt="{html.escape(alt)}">'


def _remove_stale_plots(directory: Path, written: list[str]) -> None:
    """Plots of an earlier report whose section has no input now would be misleading: they go."""
    for path in directory.glob("*.png"):
        if path.name not in written:
            path.unlink()


def _stage_work(run: Run, _resume: bool):
    index = write_report(run.run_dir.dir, run.cfg)
    run.tracker.log_artifact(run.stage_run, index.parent, REPORT_DIR)
    dataset = readable_path(run.cfg.data.output)
    if dataset is not None and run.stage_run is not None:  # the manifest is read only to be tracked
        manifest = _read_json(dataset / MANIFEST) or {}
        for name in (MANIFEST, manifest.get(MANIFEST_PROFILE) or PROFILE):
            run.tracker.log_artifact(run.stage_run, dataset / name, "dataset")
    return run.run_dir.url(f"{REPORT_DIR}/{INDEX}"), {}


# The report reads every stage's output as it is now: always written again.
STAGE = Stage(
    "report", lambda run: fingerprint([record.fingerprint for record in run.records.values()]), always_due, _stage_work
)
