"""Read throughput of a rank's loader: `ShardBatches` next to pyarrow `iter_batches` -> torch tensors.

    .venv/bin/python -m benchmarks.read                   # rank 0 of 2, batch 128, 200,000 x 32 synthetic rows
    .venv/bin/python -m benchmarks.read --features 784 --rows 4000 --profile

The dataset is the training benchmark's (benchmarks/datasets.py writes it once into --workdir; either script
reuses it). Both sides read the same Parquet files of the train split, rank 0's shard of 2 (row groups
0, 2, 4, ...: one file each), and hand out (features float32 [batch, n], label int64 [batch]) tensors:

- this project: `sparkml_par.train.data.ShardBatches(url, 0, 2, batch, shuffle=..., seed=0,
  shuffle_buffer=1024)` (the trainer's defaults), one epoch of shard_rows // batch batches, with
  shuffling on (row-group order and a shuffle buffer) and off (file order);
- baseline: `pyarrow.parquet.ParquetFile(f).iter_batches(batch_size=batch)` over the same files in
  order, each column flattened to numpy and wrapped by `torch.from_numpy`; the same baseline serves both
  rows (it is the floor of reading these files, shuffled or not). A third row sets the shuffled loader
  next to pyarrow doing the same kind of shuffle (files in a seeded order, rows permuted within each
  file, then sliced into batches; no buffer carries rows over from one file to the next, as the
  loader's does, so this baseline does less work than the loader).

Each run reads the whole shard once; the runs alternate (ours off, baseline, ours on, baseline with
shuffle, in an order that rotates each round: benchmarks.rounds) and the median of --reps counts.
Targets: loader samples/s >= 0.5x of iter_batches', and the shuffled loader >= 0.8x of pyarrow's
shuffle.
With --profile, one extra pass of the shuffled loader runs under cProfile and its top functions print.
Prints one table and writes benchmarks/results/read.json.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import pstats
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks import entry
from benchmarks.datasets import DEFAULT_WORKDIR, prepare_dataset, train_files
from benchmarks.memory import PeakMemory
from benchmarks.rounds import rotating_rounds
from benchmarks.table import print_table, result_row

RESULTS_PATH = Path(__file__).resolve().parent / "results" / "read.json"
TARGET = 0.5
SHUFFLED_TARGET = 0.8
RANK, SIZE = 0, 2


def ours(url: str, manifest: dict, batch: int, steps: int, shuffle: bool) -> Callable[[], int]:
    from sparkml_par.config import TrainConfig
    from sparkml_par.train.data import ShardBatches

    defaults = TrainConfig()
    loader = ShardBatches(
        f"{url}/{manifest['splits']['train']['path']}",
        RANK,
        SIZE,
        batch,
        label=manifest["label_column"],
        shuffle=shuffle,
        seed=defaults.seed,
        shuffle_buffer=defaults.shuffle_buffer,
    )

    def read() -> int:
        return sum(len(y) for _, y in loader.epoch(1, steps))

    return read


def pyarrow_batches(files: list[str], batch: int) -> Callable[[], int]:
    import pyarrow.parquet as pq
    import torch

    def read() -> int:
        rows = 0
        for path in files:
            for record_batch in pq.ParquetFile(path).iter_batches(batch_size=batch, columns=["features", "label"]):
                features = record_batch.column(0)
                _x = torch.from_numpy(features.flatten().to_numpy().reshape(len(features), -1))  # built, not used
                y = torch.from_numpy(record_batch.column(1).to_numpy())
                rows += len(y)
        return rows

    return read


def pyarrow_shuffled(files: list[str], batch: int, seed: int = 0) -> Callable[[], int]:
    import pyarrow.parquet as pq
    import torch

    def read() -> int:
        rng = np.random.default_rng(seed)
        rows = 0
        for index in rng.permutation(len(files)):
            table = pq.read_table(files[index], columns=["features", "label"])
            features = table.column("features").combine_chunks()
            x = features.flatten().to_numpy().reshape(len(features), -1)
            y = table.column("label").to_numpy()
            order = rng.permutation(len(y))
            x, y = x[order], y[order]
            for start in range(0, len(y), batch):
                _xb, yb = torch.from_numpy(x[start : start + batch]), torch.from_numpy(y[start : start + batch])
                rows += len(yb)
        return rows

    return read


def _timed(read: Callable[[], int]) -> tuple[float, int]:
    started = time.perf_counter()
    rows = read()
    return time.perf_counter() - started, rows


def profile(read: Callable[[], int], top: int = 15) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    read()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def run(args: argparse.Namespace) -> list[dict]:
    """Measures both sides and returns the table's rows; the full record goes to args.json."""
    import torch

    from sparkml_par.config import SparkConfig
    from sparkml_par.spark_runtime.session import get_or_create_session

    with PeakMemory() as memory:
        spark, created = get_or_create_session(SparkConfig(master="local[2]", app_name="sparkml_par read benchmark"))
        try:
            url, manifest = prepare_dataset(
                spark, args.workdir, f"synthetic-{args.rows}x{args.features}", args.rows, args.features
            )
        finally:
            if created:
                spark.stop()  # the reads need no Spark: the measured process is a rank's, without a JVM beside it

        files = train_files(url, manifest)[RANK::SIZE]
        shard_rows = sum(manifest["splits"]["train"]["files"][Path(f).name] for f in files)
        steps = shard_rows // args.batch
        sides = {
            "ours_shuffle_off": ours(url, manifest, args.batch, steps, shuffle=False),
            "pyarrow_iter_batches": pyarrow_batches(files, args.batch),
            "ours_shuffle_on": ours(url, manifest, args.batch, steps, shuffle=True),
            "pyarrow_shuffled": pyarrow_shuffled(files, args.batch),
        }
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as in a rank (train.threads_per_rank=1)
        try:
            for read in sides.values():  # warm: imports, page cache, petastorm's first reader
                read()
            passes = rotating_rounds({name: functools.partial(_timed, read) for name, read in sides.items()}, args.reps)
            times = {name: [seconds for seconds, _ in timed] for name, timed in passes.items()}
            rows = {name: timed[-1][1] for name, timed in passes.items()}
            profile_text = profile(sides["ours_shuffle_on"]) if args.profile else None
        finally:
            torch.set_num_threads(threads)

    rate = {name: rows[name] / statistics.median(values) for name, values in times.items()}
    record: dict[str, Any] = {
        "settings": {
            "rows": args.rows,
            "features": args.features,
            "batch": args.batch,
            "reps": args.reps,
            "rank": RANK,
            "size": SIZE,
        },
        "dataset": url,
        "files": files,
        "shard_rows": shard_rows,
        "steps": steps,
        "seconds": times,
        "rows_read": rows,
        "samples_per_sec": rate,
        "profile": profile_text,
    }
    target = f">= {TARGET:g}"
    baseline = "pyarrow iter_batches -> torch"
    # The reading process plays rank 0: its own peak is the rank's.
    peaks = {"driver_peak_mb": memory.driver_mb, "rank_peak_mb": memory.python_mb}
    table = [
        result_row(
            "read: loader, shuffle off (samples/s)",
            rate["ours_shuffle_off"],
            rate["pyarrow_iter_batches"],
            baseline,
            "higher",
            target,
            TARGET,
        )
        | peaks,
        result_row(
            "read: loader, shuffle on (samples/s)",
            rate["ours_shuffle_on"],
            rate["pyarrow_iter_batches"],
            baseline,
            "higher",
            target,
            TARGET,
        )
        | peaks,
        result_row(
            "read: loader, shuffle on, vs the same shuffle in pyarrow (samples/s)",
            rate["ours_shuffle_on"],
            rate["pyarrow_shuffled"],
            "pyarrow + row-group shuffle",
            "higher",
            f">= {SHUFFLED_TARGET:g}x",
            SHUFFLED_TARGET,
        )
        | peaks,
    ]
    record["rows"] = table
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=1))
    print_report(table, record)
    print(f"\nwritten: {args.json}")
    return table


def print_report(rows: list[dict], record: dict) -> None:
    print_table(rows)
    s = record["settings"]
    print(
        f"\nrank {s['rank']} of {s['size']}: {record['shard_rows']} rows x {s['features']} float32 features in "
        f"{len(record['files'])} files, batch {s['batch']}, 1 torch thread, no Spark running; median of "
        f"{s['reps']} interleaved passes in rotating order (after one warm-up pass each). Rows per pass: "
        + ", ".join(f"{name} {n}" for name, n in record["rows_read"].items())
    )
    print(
        "median seconds per pass: "
        + ", ".join(f"{name} {statistics.median(v):.3f}" for name, v in record["seconds"].items())
    )
    if record["profile"]:
        print("\nprofile of one shuffled loader pass (by own time):\n" + record["profile"])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.read", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="synthetic rows of the dataset")
    parser.add_argument("--features", type=int, default=32, help="float features per row")
    parser.add_argument("--batch", type=int, default=128, help="rows per batch")
    parser.add_argument("--reps", type=int, default=3, help="interleaved passes per side, in rotating order")
    parser.add_argument("--profile", action="store_true", help="profile one shuffled loader pass")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="where the datasets are kept")
    parser.add_argument("--json", type=Path, default=RESULTS_PATH, help="where to write the results")
    return parser


def _resolve(args: argparse.Namespace) -> str | None:
    # The baseline wraps Arrow's read-only buffers as they are, without a copy: torch notes it once.
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)
    if min(args.rows, args.features, args.batch, args.reps) < 1:
        return "--rows, --features, --batch and --reps must be positive"
    return None


def main(argv: list[str] | None = None) -> int:
    return entry.main(argv, build_parser, run, _resolve)


if __name__ == "__main__":
    sys.exit(main())
