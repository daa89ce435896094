"""What a search leaves behind: the trials table (CSV and JSON), the best config as YAML, a plot.

Everything is rebuilt from the study after each trial, so the files describe the whole study,
earlier runs of a resumed search included, even if this run is interrupted.
"""

from __future__ import annotations

import csv
import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from sparkml_par.config import Config
from sparkml_par.io import local_files
from sparkml_par.tune.space import SearchSpace, apply_params
from sparkml_par.tune.study import STALE

_STATUS = {
    TrialState.COMPLETE: "complete",
    TrialState.FAIL: "failed",
    TrialState.PRUNED: "pruned",
    TrialState.RUNNING: "running",
    TrialState.WAITING: "waiting",
}


def trial_rows(study: optuna.Study, space: SearchSpace) -> list[dict[str, Any]]:
    """One row per trial: number, status, score, duration, params, error, where it ran."""
    rows = []
    for trial in study.get_trials(deepcopy=False):
        attrs = trial.user_attrs
        status = _STATUS[trial.state]
        if attrs.get(STALE):
            status = "stale"
        rows.append(
            {
                "number": trial.number,
                "status": status,
                "score": trial.value if trial.value is not None and math.isfinite(trial.value) else None,
                "duration_s": round(attrs["duration"], 3) if "duration" in attrs else None,
                "started": _iso(attrs.get("started")),
                "finished": _iso(attrs.get("finished")),
                "epochs": attrs.get("epochs"),
                "params": space.decode(trial.params),
                "error": attrs.get("error"),
                "host": attrs.get("host"),
                "pid": attrs.get("pid"),
                "artifact": attrs.get("artifact"),
            }
        )
    return rows


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return None
    return study.best_trial


def write_table(rows: list[dict[str, Any]], output: Path) -> tuple[Path, Path]:
    """trials.json (params as a mapping) and trials.csv (one column per param, JSON text for lists)."""
    json_path, csv_path = output / "trials.json", output / "trials.csv"
    local_files.write_text(json_path, json.dumps(rows, indent=2) + "\n")
    keys = list(dict.fromkeys(key for row in rows for key in row["params"]))
    columns = [
        "number",
        "status",
        "score",
        "duration_s",
        *keys,
        "epochs",
        "started",
        "finished",
        "error",
        "host",
        "pid",
    ]
    with local_files.atomic_path(csv_path) as temp, temp.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            params = {k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in row["params"].items()}
            error = (row["error"] or "").splitlines()[:1]
            writer.writerow({**row, **params, "error": error[0] if error else ""})
    return json_path, csv_path


def write_best_config(
    cfg: Config, best: optuna.trial.FrozenTrial, space: SearchSpace, metric: str, path: Path
) -> Config:
    """The base config with the best params: `sparkml-par train <path>` trains it with train.num_proc ranks."""
    best_cfg = apply_params(cfg, space.decode(best.params))
    header = (
        f"# Best of the trials in {path.parent}: trial {best.number}, {metric}={best.value:.6g}.\n"
        f"# Train it with: sparkml-par train {path}\n"
    )
    local_files.write_text(path, header + best_cfg.to_yaml())
    return best_cfg


def plot_scores(rows: list[dict[str, Any]], metric: str, direction: str, path: Path) -> Path:
    """Score of every trial by number, the best so far as a step line, failed trials as marks at the bottom."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(figure)  # draws without a display, whatever matplotlib's global backend is
    axes = figure.add_subplot()
    for status, marker, color in (("complete", "o", "tab:blue"), ("pruned", "s", "tab:gray")):
        points = [(r["number"], r["score"]) for r in rows if r["status"] == status and r["score"] is not None]
        if points:
            axes.scatter(*zip(*points), marker=marker, color=color, label=status, zorder=3)
    complete = sorted((r["number"], r["score"]) for r in rows if r["status"] == "complete" and r["score"] is not None)
    if complete:
        pick = min if direction == "minimize" else max
        best, steps = None, []
        for number, score in complete:
            best = score if best is None else pick(best, score)
            steps.append((number, best))
        axes.step(*zip(*steps), where="post", color="tab:orange", label="best so far")
    failed = [r["number"] for r in rows if r["status"] in ("failed", "stale")]
    if failed:
        bottom = axes.get_ylim()[0] if complete else 0.0
        axes.scatter(failed, [bottom] * len(failed), marker="x", color="tab:red", label="failed", zorder=3)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("trial")
    axes.set_ylabel(f"{metric} ({direction})")
    axes.set_title(f"{metric} by trial")
    axes.grid(alpha=0.3)
    if rows:
        axes.legend(loc="best")
    with local_files.atomic_path(path) as temp:
        figure.savefig(temp)
    return path


def _iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat(timespec="milliseconds")
