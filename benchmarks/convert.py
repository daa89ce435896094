"""Conversion throughput: data_prep's petastorm write next to a plain `df.write.parquet` of the same rows.

    .venv/bin/python -m benchmarks.convert                    # 2,000,000 x 32 synthetic rows
    .venv/bin/python -m benchmarks.convert --scale            # the cost curve: 250,000 rows x 1, 4, 16

Both writes start from the same persisted synthetic DataFrame (generated in the executors), alternate in
an order that rotates each round (benchmarks.rounds), and the best of --repeats is kept. The full
prepare job (validate, profile, split, three writes) is timed as well, on --job-rows rows, and reported
without a baseline: it does more than one write. The driver's Python peak memory is noted after a small
and a full-size run: it must not grow with the row count, since no rows come to the driver. Target:
data_prep rows/s >= 0.8x the plain write's. Prints one table and writes benchmarks/results/convert.json.

With --scale, only data_prep's write runs, at 1x, 4x and 16x of --rows (best of --repeats each): its
seconds relative to 1x show how the cost grows with the data (4 and 16 would be linear). Prints a small
table and writes benchmarks/results/convert_scale.json.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

from benchmarks import entry
from benchmarks.memory import PeakMemory
from benchmarks.rounds import rotating_rounds
from benchmarks.table import number, print_table, result_row, text_table

RESULTS_DIR = Path(__file__).resolve().parent / "results"
TARGET = 0.8
ROWS, SCALE_ROWS = 2_000_000, 250_000
SCALE_FACTORS = (1, 4, 16)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def synthetic_rows(spark, rows: int, features: int):
    """The persisted DataFrame both writers start from, generated in the executors and counted once."""
    from pyspark import StorageLevel

    from data_prep.ingest import ingest
    from sparkml_par.config import DataConfig, SyntheticConfig

    cfg = DataConfig(source="synthetic", synthetic=SyntheticConfig(rows=rows, features=features, classes=10))
    df = ingest(spark, cfg).df.select("_row_id", "features", "label").persist(StorageLevel.MEMORY_AND_DISK)
    df.count()
    return df


def write_petastorm(spark, df, rows: int, features: int, target: Path) -> float:
    """Seconds of data_prep's write of df at target (removed afterwards)."""
    from data_prep.write import write_split

    seconds = _timed(
        lambda: write_split(
            spark,
            df,
            f"file://{target}",
            rows,
            shapes={"features": (features,)},
            row_group_mb=4.0,
            max_shards=8,
            split="bench",
        )
    )
    shutil.rmtree(target)
    return seconds


def write_plain(df, target: Path) -> float:
    seconds = _timed(lambda: df.write.parquet(str(target)))
    shutil.rmtree(target)
    return seconds


def measure_writes(spark, rows: int, features: int, repeats: int, workdir: Path) -> dict:
    df = synthetic_rows(spark, rows, features)
    try:
        written = itertools.count()
        seconds = rotating_rounds(
            {
                "plain": lambda: write_plain(df, workdir / f"plain{next(written)}"),
                "petastorm": lambda: write_petastorm(spark, df, rows, features, workdir / f"petastorm{next(written)}"),
            },
            repeats,
        )
        plain, petastorm = seconds["plain"], seconds["petastorm"]
    finally:
        df.unpersist()
    return {
        "rows": rows,
        "plain_s": min(plain),
        "petastorm_s": min(petastorm),
        "plain_rows_per_s": rows / min(plain),
        "petastorm_rows_per_s": rows / min(petastorm),
    }


def measure_job(spark, rows: int, features: int, workdir: Path) -> dict:
    from data_prep.job import prepare
    from sparkml_par.config import DataConfig, SyntheticConfig

    cfg = DataConfig(
        source="synthetic",
        synthetic=SyntheticConfig(rows=rows, features=features, classes=10),
        output=str(workdir / "dataset"),
        max_shards=8,
    )
    seconds = _timed(lambda: prepare(spark, cfg))
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds}


def measure_scale(spark, base_rows: int, features: int, repeats: int, workdir: Path, memory: PeakMemory) -> list[dict]:
    """data_prep's write, best of `repeats`, at each of SCALE_FACTORS x base_rows, with the peaks so far."""
    points = []
    for factor in SCALE_FACTORS:
        rows = base_rows * factor
        df = synthetic_rows(spark, rows, features)
        try:
            seconds = min(
                write_petastorm(spark, df, rows, features, workdir / f"petastorm{factor}x{i}") for i in range(repeats)
            )
        finally:
            df.unpersist()
        memory.sample()
        points.append(
            {"factor": factor, "rows": rows, "seconds": seconds, "rows_per_s": rows / seconds, **memory.columns()}
        )
    for point in points:
        point["seconds_vs_1x"] = point["seconds"] / points[0]["seconds"]
    return points


@contextlib.contextmanager
def _session(master: str) -> Iterator[tuple]:
    """(SparkSession, scratch directory), both gone afterwards."""
    from sparkml_par.config import SparkConfig
    from sparkml_par.spark_runtime.session import get_or_create_session

    spark, created = get_or_create_session(
        SparkConfig(master=master, app_name="sparkml_par convert benchmark", conf={"spark.driver.memory": "4g"})
    )
    workdir = Path(tempfile.mkdtemp(prefix="convert-bench-"))
    try:
        yield spark, workdir
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if created:
            spark.stop()


def run(args: argparse.Namespace) -> list[dict]:
    """Measures both writers and the job; returns the table's rows, the full record goes to args.json."""
    # PeakMemory ends first: the Python workers end with the session.
    with _session(args.master) as (spark, workdir), PeakMemory() as memory:
        small = measure_writes(spark, args.small_rows, args.features, 1, workdir)
        memory.sample()
        small["driver_python_peak_mb"] = memory.python_mb
        full = measure_writes(spark, args.rows, args.features, args.repeats, workdir)
        memory.sample()
        full["driver_python_peak_mb"] = memory.python_mb
        job = measure_job(spark, args.job_rows, args.features, workdir)

    rows = [
        result_row(
            f"convert: data_prep write, {args.rows:,} x {args.features} floats (rows/s)",
            full["petastorm_rows_per_s"],
            full["plain_rows_per_s"],
            "df.write.parquet",
            "higher",
            f">= {TARGET:g}x",
            TARGET,
        ),
        result_row(
            f"convert: prepare job end to end, {args.job_rows:,} x {args.features} floats (rows/s)",
            job["rows_per_s"],
            None,
            "",
            "higher",
            "reported",
        ),
    ]
    rows = [row | memory.columns() for row in rows]
    record = {
        "settings": {
            "rows": args.rows,
            "small_rows": args.small_rows,
            "job_rows": args.job_rows,
            "features": args.features,
            "repeats": args.repeats,
            "master": args.master,
        },
        "small": small,
        "full": full,
        "job": job,
        "memory": memory.columns(),
        "rows": rows,
    }
    _write(args.json, record)
    print_table(rows)
    print(
        f"\nbest of {args.repeats} rounds of rotating order: plain {full['plain_s']:.2f} s, data_prep "
        f"{full['petastorm_s']:.2f} s; prepare job {job['seconds']:.2f} s. Driver Python peak: "
        f"{small['driver_python_peak_mb']:.0f} MB after {small['rows']:,} rows, "
        f"{full['driver_python_peak_mb']:.0f} MB after {full['rows']:,} rows"
    )
    print(f"\nwritten: {args.json}")
    return rows


def run_scale(args: argparse.Namespace) -> list[dict]:
    """The cost curve of data_prep's write; returns its points, also written to args.json."""
    with _session(args.master) as (spark, workdir), PeakMemory() as memory:
        points = measure_scale(spark, args.rows, args.features, args.repeats, workdir, memory)
    _write(
        args.json,
        {
            "settings": {
                "rows": args.rows,
                "features": args.features,
                "repeats": args.repeats,
                "master": args.master,
                "factors": list(SCALE_FACTORS),
            },
            "points": points,
        },
    )
    header = ("data_prep write", "rows", "seconds", "rows/s", "seconds vs 1x", "driver peak MB", "worker peak MB")
    print()
    print(
        text_table(
            [
                header,
                *(
                    (
                        f"{p['factor']}x",
                        f"{p['rows']:,}",
                        f"{p['seconds']:.2f}",
                        number(p["rows_per_s"]),
                        f"{p['seconds_vs_1x']:.2f}x",
                        number(p["driver_peak_mb"]),
                        number(p["rank_peak_mb"]),
                    )
                    for p in points
                ),
            ]
        )
    )
    print(
        f"\n{args.features} float features per row; best of {args.repeats} writes per size; peaks are the "
        "highest so far."
    )
    print(f"\nwritten: {args.json}")
    return points


def _write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.convert", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=int, help=f"synthetic rows (default {ROWS:,}; with --scale {SCALE_ROWS:,}, the 1x of the curve)"
    )
    parser.add_argument("--small-rows", type=int, default=200_000, help="the smaller run of the memory check")
    parser.add_argument("--job-rows", type=int, help="rows of the prepare job (default --rows)")
    parser.add_argument("--features", type=int, default=32, help="float features per row")
    parser.add_argument("--repeats", type=int, default=2, help="writes per writer, in rotating order; the best is kept")
    parser.add_argument("--master", default="local[2]", help="Spark master")
    parser.add_argument(
        "--scale",
        action="store_true",
        help=f"only data_prep's write, at {', '.join(f'{f}x' for f in SCALE_FACTORS)} of --rows",
    )
    parser.add_argument(
        "--json",
        type=Path,
        help="where to write the results (default benchmarks/results/convert.json; with --scale convert_scale.json)",
    )
    return parser


def _resolve(args: argparse.Namespace) -> str | None:
    if args.rows is None:
        args.rows = SCALE_ROWS if args.scale else ROWS
    if args.job_rows is None:
        args.job_rows = args.rows
    if args.json is None:
        args.json = RESULTS_DIR / ("convert_scale.json" if args.scale else "convert.json")
    if min(args.rows, args.small_rows, args.job_rows, args.features, args.repeats) < 1:
        return "--rows, --small-rows, --job-rows, --features and --repeats must be positive"
    return None


def _run(args: argparse.Namespace) -> list[dict]:
    """The table's rows, or none for the cost curve (its points are its own table)."""
    if args.scale:
        run_scale(args)
        return []
    return run(args)


def main(argv: list[str] | None = None) -> int:
    return entry.main(argv, build_parser, _run, _resolve)


if __name__ == "__main__":
    raise SystemExit(main())
