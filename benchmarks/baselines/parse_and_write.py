"""End-to-end floor F: one parse and one write of a tabular CSV, the least a prepare of it can cost.

`spark.read.csv` with the declared schema, then `df.write.parquet`: every row parsed once and written
once, with nothing checked, counted or featurized. Timed as prepare is (from the session's start up to
the written files), in a fresh process on the same local[N] session as the other baselines.

    .venv/bin/python benchmarks/baselines/parse_and_write.py --request '{"input": ..., "workdir": ..., ...}'
"""

from __future__ import annotations

import sys
import time

from baseline_session import build_session
from hand_stitched import csv_schema, serve

STARTED = time.perf_counter()


def run(request: dict) -> dict:
    spark = build_session(request["num_proc"], "parse-and-write")
    times = {"start-up": time.perf_counter() - STARTED}
    mark = time.perf_counter()
    rows = spark.read.csv(request["input"], header=True, schema=csv_schema(request["csv"]["columns"]))
    rows.write.parquet(f"{request['workdir']}/parsed")
    times["prepare"] = time.perf_counter() - mark
    spark.stop()
    return {"stage_seconds": times, "seconds": time.perf_counter() - STARTED, "accuracy": None}


if __name__ == "__main__":
    sys.exit(serve(run))
