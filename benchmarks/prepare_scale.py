"""How the whole prepare job's time grows with the rows and with the columns of a tabular input.

    .venv/bin/python -m benchmarks.prepare_scale                         # rows 20,000 x 1, 4, 16; columns 32, 128, 512
    .venv/bin/python -m benchmarks.prepare_scale --rows 5000 --column-rows 1000

The input is a Parquet file of float columns and an int64 label (benchmarks.end_to_end.write_input: a
random linear teacher's classes), written once per point and not timed. Each point runs
`data_prep.job.prepare` (ingest, validate with quarantine, duplicates, profile, featurize with the
Spark ML pipeline, the three petastorm writes) in one session, so the session's start is not in the
figure; the first point runs once more beforehand to warm the JVM. Rows: --rows x 1, 4, 16 at 32
columns; columns: 32, 128, 512 at --column-rows rows. Each row of the table is a point's seconds next to
the first point of its curve, with linear growth as the target (4x the rows or columns in at most 4x
the time). Last, the 1x input is prepared once more, unchanged: prepare compares the input's fingerprint
(paths, sizes, times) with the dataset's manifest and stops (target: under 2 s). Writes
benchmarks/results/prepare_scale.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import entry
from benchmarks.end_to_end import Workload, write_input
from benchmarks.memory import PeakMemory
from benchmarks.table import print_table, result_row

RESULTS_PATH = Path(__file__).resolve().parent / "results" / "prepare_scale.json"
FACTORS = (1, 4, 16)
COLUMNS = (32, 128, 512)
# An unchanged prepare (same input files and config) finds its dataset and stops in less than this.
SKIP_SECONDS = 2.0


def time_prepare(spark, rows: int, columns: int, workdir: Path, run: str = "timed", unchanged: bool = False) -> float:
    """Seconds of one prepare of a rows x columns input into a dataset of its own (run names it); with
    unchanged, of a prepare that finds that dataset already built from the same input and config."""
    from data_prep.job import prepare
    from sparkml_par.config import load_config

    name = f"{rows}x{columns}"
    data = workdir / f"{name}.parquet"
    if not data.exists():
        write_input(Workload(name, epochs=1, batch_size=1, rows=rows, features=columns), data)
    cfg = load_config(
        None,
        ["data.source=parquet", f"data.path={data}", f"data.output={workdir / name}-{run}", "data.mode=overwrite"],
    )
    started = time.perf_counter()
    result = prepare(spark, cfg.data)
    seconds = time.perf_counter() - started
    if result.skipped != unchanged or result.manifest["rows_in"] != rows:
        raise RuntimeError(
            f"prepare of {name} was {'not ' if unchanged else ''}skipped, or read {result.manifest['rows_in']} "
            f"rows, not {rows}"
        )
    return seconds


def run(args: argparse.Namespace) -> list[dict]:
    from sparkml_par.config import load_config
    from sparkml_par.spark_runtime.session import spark_session

    rows_curve = [(args.rows * f, 32) for f in FACTORS]
    columns_curve = [(args.column_rows, c) for c in COLUMNS]
    points: dict[tuple[int, int], float] = {}  # (rows, columns) -> seconds
    with tempfile.TemporaryDirectory(prefix="prepare-scale-bench-") as tmp, PeakMemory() as memory:
        with spark_session(load_config(None, []).spark) as spark:
            time_prepare(spark, *rows_curve[0], Path(tmp), "warm-up")  # warms the JVM, the Python workers, the codegen
            for rows, columns in rows_curve + columns_curve:
                if (rows, columns) not in points:
                    points[rows, columns] = time_prepare(spark, rows, columns, Path(tmp))
                    print(f"  prepare {rows:,} rows x {columns} columns: {points[rows, columns]:.1f} s", flush=True)
            skip = time_prepare(spark, *rows_curve[0], Path(tmp), unchanged=True)
            print(f"  prepare of the unchanged 1x input: {skip:.2f} s", flush=True)
    rows = []
    for curve, what in ((rows_curve, "rows"), (columns_curve, "columns")):
        first = points[curve[0]]
        for (n, c), factor in zip(curve[1:], FACTORS[1:]):
            part = f"prepare scale: {factor}x the {what} ({n:,} rows x {c} columns, s)"
            base = f"1x: {curve[0][0]:,} x {curve[0][1]}"
            rows.append(
                result_row(part, points[n, c], first, base, "lower", f"<= {factor}x (linear)", factor)
                | memory.columns()
            )
    first = points[rows_curve[0]]
    unchanged = result_row(
        f"prepare scale: the 1x input again, unchanged, found built ({rows_curve[0][0]:,} rows x 32 columns, s)",
        skip,
        first,
        "its first prepare",
        "lower",
        f"< {SKIP_SECONDS:g} s",
    )
    rows.append(unchanged | {"met": skip < SKIP_SECONDS} | memory.columns())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {"seconds": {f"{n}x{c}": t for (n, c), t in points.items()}, "unchanged_seconds": skip, "rows": rows},
            indent=2,
        )
        + "\n"
    )
    print_table(rows)
    print(f"\nwritten: {args.json}")
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.prepare_scale", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000, help="rows of the rows curve's 1x (default 20,000)")
    parser.add_argument("--column-rows", type=int, default=2_000, help="rows of the columns curve (default 2,000)")
    parser.add_argument("--json", type=Path, default=RESULTS_PATH, help="where to write the results")
    return parser


def _resolve(args: argparse.Namespace) -> str | None:
    return "--rows and --column-rows must be at least 100" if min(args.rows, args.column_rows) < 100 else None


def main(argv: list[str] | None = None) -> int:
    return entry.main(argv, build_parser, run, _resolve)


if __name__ == "__main__":
    sys.exit(main())
