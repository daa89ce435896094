"""End to end: the same job three ways, from a fresh process to scored predictions, interleaved in one run.

    .venv/bin/python -m benchmarks.end_to_end                        # both workloads, 3 repetitions
    .venv/bin/python -m benchmarks.end_to_end --workloads digits --reps 1

- (A) this project: `sparkml-par run` as a user runs it (its own process and Spark JVM, local[2]):
  prepare (validate, quarantine, profile, featurize, write), train (2 Horovod ranks in a barrier
  stage), score, report. Its stages' times come from the run's stages.json.
- (B) Horovod's own estimator, `horovod.spark.torch.TorchEstimator` with a LocalStore: fit on a
  DataFrame, `transform` to score (benchmarks/baselines/horovod_estimator.py).
- (C) the stack a user stitches by hand: petastorm's `make_spark_converter` -> `TorchDistributor(
  num_processes=2, local_mode=True)` running torch DDP (gloo) over the converter's loader ->
  `predict_batch_udf` (benchmarks/baselines/hand_stitched.py).

Each reads the same raw Parquet file (feature columns and `label`, written once, never timed) and
trains the same MLP (256, 256) with Adam, the same global batch and epochs, on 2 processes; each
writes its predictions of a held-out fifth of the rows and reports the test accuracy. The workloads:
scikit-learn's digits (1,797 rows, 64 pixel columns, 5 epochs) and a synthetic 200,000 x 32 float
table whose 10 classes come from a random linear teacher (2 epochs). Medians of --reps repetitions;
the order of A, B and C turns each repetition (benchmarks.rounds), so that each sees the machine's load alike.

B runs in this project's environment, with the tensorboard packages the estimator imports (and this
project does not need) installed once into benchmarks/.estimator-packages; a baseline that cannot run is
recorded as such and the benchmark goes on. Memory: the CLI's process with its JVM (driver) and its Spark
Python workers (ranks). Prints the table and the stages of each way; writes benchmarks/results/end_to_end.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import entry, tabular
from benchmarks.memory import PeakMemory
from benchmarks.rounds import rotating_rounds
from benchmarks.table import print_table, result_row

REPO = Path(__file__).resolve().parents[1]
RESULTS_PATH = REPO / "benchmarks" / "results" / "end_to_end.json"
BASELINES = REPO / "benchmarks" / "baselines"
CONF = REPO / "conf" / "quickstart.yaml"
# What horovod.spark.torch imports beyond Horovod (torch.utils.tensorboard), without their dependencies:
# the project's environment has numpy, protobuf and the rest at its own pins.
ESTIMATOR_PACKAGES_DIR = REPO / "benchmarks" / ".estimator-packages"
ESTIMATOR_PACKAGES = [
    "tensorboard==2.21.0",
    "tensorboard-data-server==0.7.2",
    "absl-py==2.5.1",
    "markdown==3.11.3",
    "werkzeug==3.1.9",
]
WAYS = {"A": "sparkml-par run", "B": "Horovod TorchEstimator", "C": "hand-stitched", "F": "parse and write"}
STAGES = ("start-up", "prepare", "train", "score", "report")
NUM_PROC = 2
HIDDEN = [256, 256]
LR = 1e-3
SEED = 0


@dataclass(frozen=True)
class Workload:
    title: str
    epochs: int
    batch_size: int
    rows: int = 0  # 0: scikit-learn's digits
    features: int = 0
    classes: int = 10
    # A CSV shaped like a flights export (benchmarks.tabular), featurized by each way's own Spark ML pipeline.
    tabular: bool = False
    reps: int | None = None  # None: --reps

    @property
    def ways(self) -> tuple[str, ...]:
        """Tabular workloads run against the hand-stitched stack and one parse-and-write of the same rows."""
        return ("A", "C", "F") if self.tabular else ("A", "B", "C")


WORKLOADS = {
    "digits": Workload("digits, MLP, 5 epochs", epochs=5, batch_size=64),
    "synthetic": Workload("synthetic 200k x 32, MLP, 2 epochs", epochs=2, batch_size=256, rows=200_000, features=32),
    "tabular": Workload(
        "tabular CSV 336,776 rows, MLP, 2 epochs", epochs=2, batch_size=512, rows=tabular.ROWS, classes=2, tabular=True
    ),
    "tabular-10x": Workload(
        "tabular CSV 3,367,760 rows, MLP, 2 epochs",
        epochs=2,
        batch_size=512,
        rows=10 * tabular.ROWS,
        classes=2,
        tabular=True,
        reps=1,
    ),
}
# What the hand-stitched stack and the parse-and-write floor are told of a tabular CSV.
TABULAR_REQUEST = {
    "columns": tabular.COLUMNS,
    "numeric": list(tabular.NUMERIC),
    "text": list(tabular.CATEGORIES),
    "label": tabular.LABEL,
}


def input_path(name: str, workload: Workload, tmp: str) -> Path:
    return Path(tmp) / f"{name}.{'csv' if workload.tabular else 'parquet'}"


def write_input(workload: Workload, path: Path) -> None:
    """The raw input: a tabular workload's CSV, or one Parquet file of float feature columns and an int64
    `label`."""
    import numpy as np
    import pandas as pd

    if workload.tabular:
        tabular.write_csv(path, rows=workload.rows, seed=SEED)
        return
    if workload.rows == 0:
        from sklearn.datasets import load_digits

        digits = load_digits()
        x, y = digits.data.astype(np.float32), digits.target.astype(np.int64)
    else:
        rng = np.random.default_rng(SEED)
        x = rng.standard_normal((workload.rows, workload.features), dtype=np.float32)
        teacher = rng.standard_normal((workload.features, workload.classes), dtype=np.float32)
        y = (x @ teacher).argmax(axis=1).astype(np.int64)
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(x.shape[1])])
    frame["label"] = y
    frame.to_parquet(path)


def run_ours(workload: Workload, data: Path, workdir: Path) -> dict:
    """A: the CLI, with every output under workdir (nothing is skipped as unchanged)."""
    cli = Path(sys.executable).parent / "sparkml-par"
    source = (
        ["data.source=csv", f"data.label={tabular.LABEL}", "data.featurize.impute=median"]
        if workload.tabular
        else ["data.source=parquet"]
    )
    command = [
        str(cli),
        "run",
        "--quiet",
        str(CONF),
        *source,
        f"data.path={data}",
        "data.split.train=0.8",
        "data.split.validation=0",
        "data.split.test=0.2",
        "train.model=mlp",
        f"train.epochs={workload.epochs}",
        f"train.batch_size={workload.batch_size}",
        f"train.num_proc={NUM_PROC}",
        f"train.lr={LR}",
        *(
            f"{key}={workdir / name}"
            for key, name in {
                "data.output": "dataset",
                "train.output": "model",
                "score.output": "predictions",
                "tune.output": "tune",
                "output.run_dir": "run",
            }.items()
        ),
    ]
    log = workdir / "cli.log"
    with log.open("w") as out:
        started = time.perf_counter()
        # cwd=workdir: Spark's own files (spark-warehouse, derby.log) land there too.
        process = subprocess.Popen(command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT)
        with PeakMemory(root=process.pid) as memory:
            code = process.wait()
        seconds = time.perf_counter() - started
    if code != 0:
        tail = "\n".join(log.read_text().splitlines()[-30:])
        raise RuntimeError(f"{' '.join(command)} exited with {code}; last lines of its output:\n{tail}")
    stages = json.loads((workdir / "run" / "stages.json").read_text())
    stage_seconds = {name: record["seconds"] for name, record in stages.items()}
    stage_seconds = {"start-up": seconds - sum(stage_seconds.values()), **stage_seconds}
    accuracy = stages["score"]["summary"]["metrics"]["accuracy"]
    return {
        "seconds": seconds,
        "stage_seconds": stage_seconds,
        "accuracy": accuracy,
        "memory": memory.columns(),
        "prepare_steps": stages["prepare"]["summary"]["steps"],
    }


def run_baseline(script: str, workload: Workload, data: Path, workdir: Path, env: dict[str, str]) -> dict:
    """B or C: the baseline script in a fresh process; its RESULT line, or {"error": ...}."""
    request = {
        "input": str(data),
        "workdir": str(workdir),
        "num_proc": NUM_PROC,
        "epochs": workload.epochs,
        "batch_size": workload.batch_size,
        "lr": LR,
        "hidden": HIDDEN,
        "classes": workload.classes,
        "seed": SEED,
        **({"csv": TABULAR_REQUEST} if workload.tabular else {}),
    }
    log = workdir / f"{script}.log"
    with log.open("w") as out:
        started = time.perf_counter()
        code = subprocess.call(
            [sys.executable, str(BASELINES / f"{script}.py"), "--request", json.dumps(request)],
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )
        seconds = time.perf_counter() - started
    results = [line for line in log.read_text().splitlines() if line.startswith("RESULT ")]
    if code != 0 or not results:
        tail = "\n".join(log.read_text().splitlines()[-12:])
        return {"error": f"{script}.py exited with {code}: {tail}"}
    result = json.loads(results[-1].removeprefix("RESULT "))
    return {**result, "seconds": seconds}  # the process's wall time, measured as A's is


def estimator_env() -> dict[str, str] | str:
    """PYTHONPATH with the estimator's extra packages (installed once), or why they cannot be had."""
    ready = ESTIMATOR_PACKAGES_DIR / ".ready"
    if not ready.exists():
        print(f"installing {', '.join(ESTIMATOR_PACKAGES)} into {ESTIMATOR_PACKAGES_DIR} (once) ...", flush=True)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade", "--target"]
            + [str(ESTIMATOR_PACKAGES_DIR), *ESTIMATOR_PACKAGES],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            return f"pip could not install the estimator's packages: {done.stderr.strip()[-500:]}"
        ready.touch()
    return {"PYTHONPATH": str(ESTIMATOR_PACKAGES_DIR)}


def medians(runs: list[dict]) -> dict | None:
    """Median seconds, stage seconds and accuracy of the runs that finished; None when none did."""
    done = [r for r in runs if "error" not in r]
    if not done:
        return None
    stages = {s: statistics.median(r["stage_seconds"].get(s, 0.0) for r in done) for s in STAGES}
    accuracies = [r["accuracy"] for r in done if r["accuracy"] is not None]
    return {
        "seconds": statistics.median(r["seconds"] for r in done),
        "stage_seconds": stages,
        "accuracy": statistics.median(accuracies) if accuracies else None,
        "runs": len(done),
    }


def workload_rows(name: str, summary: dict[str, dict | None], memory: dict) -> list[dict]:
    title = WORKLOADS[name].title
    a, b, c, floor = (summary.get(w) for w in WAYS)
    if a is None:
        return []

    def seconds(way: dict | None, stage: str | None = None) -> float | None:
        if way is None:
            return None
        return way["seconds"] if stage is None else way["stage_seconds"][stage]

    accuracy = ", ".join(f"{w} {s['accuracy']:.3f}" for w, s in summary.items() if s and s["accuracy"] is not None)
    rows = [
        result_row(
            f"end to end, {title} (s; test accuracy {accuracy})",
            a["seconds"],
            seconds(c),
            WAYS["C"],
            "lower",
            "<= 0.8x",
            0.8,
        )
        | memory,
        result_row(
            f"prepare, {title} (s)", seconds(a, "prepare"), seconds(c, "prepare"), WAYS["C"], "lower", "<= 1.0x", 1.0
        ),
    ]
    if "B" in summary:
        rows.insert(
            1, result_row(f"end to end, {title} (s)", a["seconds"], seconds(b), WAYS["B"], "lower", "< 1.0x", 0.999)
        )
    if "F" in summary:
        rows.append(
            result_row(
                f"prepare, {title} (s)",
                seconds(a, "prepare"),
                seconds(floor, "prepare"),
                WAYS["F"],
                "lower",
                "reported",
            )
        )
    for stage in ("start-up", "train", "score"):
        rows.append(
            result_row(f"{stage}, {title} (s)", seconds(a, stage), seconds(c, stage), WAYS["C"], "lower", "reported")
        )
    return rows


def run_way(way: str, workload: Workload, data: Path, tmp: str, env_b: dict[str, str] | str, memory: dict) -> dict:
    """One run of a way in a work directory of its own; A's memory columns go into `memory`."""
    workdir = Path(tempfile.mkdtemp(prefix=f"{data.stem}-{way}-", dir=tmp))
    print(f"    {WAYS[way]} ...", flush=True)
    if way == "A":
        result = run_ours(workload, data, workdir)
        memory.update(result.pop("memory"))
    elif way == "B" and isinstance(env_b, str):
        result = {"error": env_b}
    else:
        script = {"B": "horovod_estimator", "C": "hand_stitched", "F": "parse_and_write"}[way]
        result = run_baseline(script, workload, data, workdir, env_b if way == "B" else {})
    if "error" in result:
        print(f"    {WAYS[way]} did not finish: {result['error']}", flush=True)
    return result


def run(args: argparse.Namespace) -> list[dict]:
    env_b = estimator_env()
    rows, record = [], {"settings": {"reps": args.reps, "workloads": args.workloads}, "workloads": {}}
    with tempfile.TemporaryDirectory(prefix="end-to-end-bench-") as tmp:
        for name in args.workloads:
            workload = WORKLOADS[name]
            data = input_path(name, workload, tmp)
            write_input(workload, data)
            memory: dict = {}
            runs = rotating_rounds(
                {way: functools.partial(run_way, way, workload, data, tmp, env_b, memory) for way in workload.ways},
                workload.reps or args.reps,
                title=f"  {name}",
            )
            summary = {w: medians(r) for w, r in runs.items()}
            record["workloads"][name] = {"runs": runs, "medians": summary}
            rows += workload_rows(name, summary, memory)
            print_stages(workload.title, summary)
            print_prepare_steps([r for r in runs["A"] if "error" not in r])
            data.unlink()
    record["rows"] = rows
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=2) + "\n")
    print_table(rows)
    print(f"\nwritten: {args.json}")
    return rows


def print_stages(title: str, summary: dict[str, dict | None]) -> None:
    print(f"\n{title}: median seconds per stage")
    print(f"  {'way':<24}" + "".join(f"{s:>10}" for s in (*STAGES, "total")) + f"{'accuracy':>10}")
    for way, s in summary.items():
        if s is None:
            print(f"  {WAYS[way]:<24} did not finish")
            continue
        cells = "".join(f"{s['stage_seconds'][stage]:>10.2f}" for stage in STAGES)
        accuracy = f"{s['accuracy']:>10.3f}" if s["accuracy"] is not None else f"{'-':>10}"
        print(f"  {WAYS[way]:<24}{cells}{s['seconds']:>10.2f}{accuracy}")


def print_prepare_steps(runs: list[dict]) -> None:
    """Each step of this project's prepare in each run: seconds and Spark jobs (the steps marked "beside"
    ran in the background, beside the others)."""
    if not runs:
        return
    print("\n  prepare's steps (s / Spark jobs), per run:")
    for step in (s["step"] for s in runs[0]["prepare_steps"]):
        cells = []
        for r in runs:
            found = next((s for s in r["prepare_steps"] if s["step"] == step), None)
            cells.append(f"{found['seconds']:>7.2f} / {found['jobs']:<3d}" if found else f"{'-':>13}")
        print(f"  {step:<18}" + "".join(cells))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.end_to_end", description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument(
        "--reps", type=int, default=3, help="repetitions of each way (default 3; medians); tabular-10x runs once"
    )
    parser.add_argument("--json", type=Path, default=RESULTS_PATH, help="where to write the results")
    return parser


def _resolve(args: argparse.Namespace) -> str | None:
    return "--reps must be at least 1" if args.reps < 1 else None


def main(argv: list[str] | None = None) -> int:
    return entry.main(argv, build_parser, run, _resolve)


if __name__ == "__main__":
    sys.exit(main())
