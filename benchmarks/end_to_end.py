"""End to end: wall time of the quickstart pipeline, `sparkml-par run conf/quickstart.yaml`, from a clean start.

    .venv/bin/python -m benchmarks.end_to_end
    .venv/bin/python -m benchmarks.end_to_end train.epochs=2      # overrides go to the CLI

The CLI runs as a user runs it (its own process and Spark JVM, local[2]) with every output of the
config (dataset, model, predictions, tune, run directory) in a fresh temporary directory, so no stage
is skipped as unchanged: prepare (digits), train (CNN, 2 Horovod ranks), score, report. The figure is
the process's wall time, start to exit; the stages' own times come from the run's stages.json. There
is no baseline: the time is reported. Memory: the CLI's process with its JVM (driver), and its Spark
Python workers (ranks). Prints one table and writes benchmarks/results/end_to_end.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import entry
from benchmarks.memory import PeakMemory
from benchmarks.table import print_table, result_row

REPO = Path(__file__).resolve().parents[1]
RESULTS_PATH = REPO / "benchmarks" / "results" / "end_to_end.json"
CONF = REPO / "conf" / "quickstart.yaml"
# Every path of the config, as section.key -> directory name inside the temporary directory.
OUTPUTS = {
    "data.output": "dataset",
    "train.output": "model",
    "score.output": "predictions",
    "tune.output": "tune",
    "output.run_dir": "run",
}


def cli() -> Path:
    """The sparkml-par console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "sparkml-par"
    if not script.exists():
        raise SystemExit(f"{script} does not exist: install the project into this environment (make setup)")
    return script


def run_pipeline(conf: Path, overrides: list[str], workdir: Path) -> tuple[float, PeakMemory, dict]:
    """(wall seconds, the process tree's peaks, stages.json) of one run with its outputs under workdir."""
    command = [
        str(cli()),
        "run",
        "--quiet",
        str(conf),
        *(f"{key}={workdir / name}" for key, name in OUTPUTS.items()),
        *overrides,
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
    return seconds, memory, json.loads((workdir / OUTPUTS["output.run_dir"] / "stages.json").read_text())


def run(args: argparse.Namespace) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="end-to-end-bench-") as tmp:
        print(f"running sparkml-par run {args.conf} with its outputs in {tmp} ...", flush=True)
        seconds, memory, stages = run_pipeline(args.conf, args.overrides, Path(tmp))
    try:
        conf = args.conf.relative_to(REPO)
    except ValueError:
        conf = args.conf
    part = " ".join(["end to end: sparkml-par run", str(conf), *args.overrides]) + " (s)"
    rows = [result_row(part, seconds, None, "", "lower", "reported") | memory.columns()]
    stage_seconds = {name: record["seconds"] for name, record in stages.items()}
    record = {
        "settings": {"conf": str(args.conf), "overrides": args.overrides},
        "seconds": seconds,
        "stage_seconds": stage_seconds,
        "memory": memory.columns(),
        "rows": rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=2) + "\n")
    print_table(rows)
    print(
        "\nstages: "
        + ", ".join(f"{name} {value:.1f} s" for name, value in stage_seconds.items())
        + f"; start-up (Python, Spark JVM) and shut-down {seconds - sum(stage_seconds.values()):.1f} s"
    )
    print(f"\nwritten: {args.json}")
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.end_to_end", description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="settings passed to the CLI")
    parser.add_argument("--conf", type=Path, default=CONF, help="the pipeline config (default conf/quickstart.yaml)")
    parser.add_argument("--json", type=Path, default=RESULTS_PATH, help="where to write the results")
    return parser


def _resolve(args: argparse.Namespace) -> str | None:
    args.conf = args.conf.resolve()
    if not args.conf.is_file():
        return f"--conf {args.conf}: no such file"
    redirected = [o for o in args.overrides if o.partition("=")[0] in OUTPUTS]
    if redirected:
        return f"{', '.join(redirected)}: the benchmark puts every output in a temporary directory itself"
    return None


def main(argv: list[str] | None = None) -> int:
    return entry.main(argv, build_parser, run, _resolve)


if __name__ == "__main__":
    sys.exit(main())
