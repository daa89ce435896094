"""Conversion throughput: data_prep's petastorm write next to a plain `df.write.parquet` of the same rows.

    .venv/bin/python -m benchmarks.convert --rows 2000000 --features 32

Both writes start from the same persisted synthetic DataFrame (generated in the executors), alternate,
and the best of --repeats is kept. The driver's peak memory (Python RSS) is reported for a small and a
full-size run: it must not grow with the row count, since no rows come to the driver. The full prepare
job (validate, profile, split, three writes) is timed as well. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import tempfile
import time
from pathlib import Path

from data_prep.ingest import ingest
from data_prep.job import prepare
from data_prep.write import write_split
from sparkml_par.config import DataConfig, SparkConfig, SyntheticConfig
from sparkml_par.session import get_or_create_session


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure_writes(spark, rows: int, features: int, repeats: int, workdir: Path) -> dict:
    from pyspark import StorageLevel

    cfg = DataConfig(source="synthetic", synthetic=SyntheticConfig(rows=rows, features=features, classes=10))
    df = ingest(spark, cfg).df.select("_row_id", "features", "label").persist(StorageLevel.MEMORY_AND_DISK)
    df.count()
    plain, petastorm = [], []
    for i in range(repeats):
        target = workdir / f"plain{i}"
        plain.append(_timed(lambda: df.write.parquet(str(target))))
        shutil.rmtree(target)
        target = workdir / f"petastorm{i}"
        petastorm.append(_timed(lambda: write_split(spark, df, f"file://{target}", rows,
                                                    shapes={"features": (features,)}, row_group_mb=4.0,
                                                    max_shards=8, split="bench")))
        shutil.rmtree(target)
    df.unpersist()
    return {"rows": rows, "plain_s": min(plain), "petastorm_s": min(petastorm),
            "plain_rows_per_s": rows / min(plain), "petastorm_rows_per_s": rows / min(petastorm),
            "ratio": min(plain) / min(petastorm), "driver_peak_rss_mb": _peak_rss_mb()}


def measure_job(spark, rows: int, features: int, workdir: Path) -> dict:
    cfg = DataConfig(source="synthetic", synthetic=SyntheticConfig(rows=rows, features=features, classes=10),
                     output=str(workdir / "dataset"), max_shards=8)
    seconds = _timed(lambda: prepare(spark, cfg))
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds, "driver_peak_rss_mb": _peak_rss_mb()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--small-rows", type=int, default=200_000, help="the smaller run of the memory check")
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", default="runs/bench/convert.json")
    args = parser.parse_args(argv)

    spark, _ = get_or_create_session(SparkConfig(master=args.master, conf={"spark.driver.memory": "4g"}))
    with tempfile.TemporaryDirectory(prefix="convert-bench-") as tmp:
        workdir = Path(tmp)
        small = measure_writes(spark, args.small_rows, args.features, 1, workdir)
        full = measure_writes(spark, args.rows, args.features, args.repeats, workdir)
        job = measure_job(spark, args.rows, args.features, workdir)

    print(f"{'':34}{'rows':>10}{'seconds':>10}{'rows/s':>12}{'vs plain':>10}")
    print(f"{'plain df.write.parquet':34}{full['rows']:>10}{full['plain_s']:>10.2f}{full['plain_rows_per_s']:>12.0f}"
          f"{1.0:>10.2f}")
    print(f"{'data_prep write_split (petastorm)':34}{full['rows']:>10}{full['petastorm_s']:>10.2f}"
          f"{full['petastorm_rows_per_s']:>12.0f}{full['ratio']:>10.2f}")
    print(f"{'prepare job end to end':34}{job['rows']:>10}{job['seconds']:>10.2f}{job['rows_per_s']:>12.0f}"
          f"{full['plain_s'] / job['seconds']:>10.2f}")
    print(f"driver peak RSS: {small['driver_peak_rss_mb']:.0f} MB after {small['rows']} rows, "
          f"{full['driver_peak_rss_mb']:.0f} MB after {full['rows']} rows, {job['driver_peak_rss_mb']:.0f} MB "
          f"after the job")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"small": small, "full": full, "job": job, "features": args.features,
                               "master": args.master}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
