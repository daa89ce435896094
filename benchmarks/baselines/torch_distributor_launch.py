"""Baseline for the launcher benchmark: launch time of pyspark's TorchDistributor on a warm session.

Runs in its own virtual environment (TorchDistributor needs pyarrow >= 15, petastorm needs < 15), in a
process of its own with its own local[2] SparkSession bound to loopback. It warms up once, then times
`TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(fn)` where fn joins a gloo
process group and reports the time right after. The last stdout line is `RESULT <json>`.

    benchmarks/.venv-baseline/bin/python benchmarks/baselines/torch_distributor_launch.py --reps 5

With --serve it prints `READY` after the warm-up and then times one launch per `launch` line on stdin
(answering `LAUNCH <json>`) until `quit`: the benchmark interleaves these launches with its own, so that
both see the same load on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time

from baseline_session import build_session

RESULT_PREFIX = "RESULT "
LAUNCH_PREFIX = "LAUNCH "


def join_gloo_group() -> dict:
    """The trivial training function: the time it starts, and the time it is past the process group."""
    started = time.time()
    import torch.distributed as dist

    dist.init_process_group("gloo")
    # Gloo's init connects the full mesh, so rank 0 past it means every rank has joined.
    initialized = time.time()
    rank, size = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()
    return {
        "fn_started": started,
        "initialized": initialized,
        "rank": rank,
        "size": size,
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def time_one_launch(distributor) -> dict:
    called = time.time()
    out = distributor.run(join_gloo_group)
    returned = time.time()
    if not out or out.get("size") != distributor.num_processes:
        raise RuntimeError(
            f"TorchDistributor returned {out!r}; expected a record from a group of "
            f"{distributor.num_processes} processes"
        )
    return {
        "init_s": out["initialized"] - called,
        "fn_start_s": out["fn_started"] - called,
        "total_s": returned - called,
        "rank0_maxrss_kb": out["maxrss_kb"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="timed launches after one warm-up")
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--serve", action="store_true", help="time one launch per 'launch' line on stdin")
    args = parser.parse_args(argv)

    import pyarrow
    import pyspark
    import torch
    from pyspark.ml.torch.distributor import TorchDistributor

    spark = build_session(args.num_proc, "torch_distributor_baseline")
    try:
        distributor = TorchDistributor(num_processes=args.num_proc, local_mode=False, use_gpu=False)
        warmup = time_one_launch(distributor)
        if args.serve:
            reps = _serve(distributor)
        else:
            reps = [time_one_launch(distributor) for _ in range(args.reps)]
    finally:
        spark.stop()
    result = {
        "versions": {
            "pyspark": pyspark.__version__,
            "torch": torch.__version__,
            "pyarrow": pyarrow.__version__,
            "python": sys.version.split()[0],
        },
        "num_proc": args.num_proc,
        "warmup": warmup,
        "reps": reps,
        "median": {key: statistics.median(r[key] for r in reps) for key in ("init_s", "fn_start_s", "total_s")}
        if reps
        else {},
        "driver_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


def _serve(distributor) -> list[dict]:
    print("READY", flush=True)
    reps = []
    for line in sys.stdin:
        command = line.strip()
        if command == "quit":
            break
        if command == "launch":
            reps.append(time_one_launch(distributor))
            print(LAUNCH_PREFIX + json.dumps(reps[-1]), flush=True)
    return reps


if __name__ == "__main__":
    sys.exit(main())
