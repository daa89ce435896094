"""Baseline for the training benchmark: pyspark's TorchDistributor running DistributedDataParallel (gloo).

Runs in its own virtual environment (TorchDistributor needs pyarrow >= 15, petastorm needs < 15), in a
process of its own with its own local[N] SparkSession bound to loopback. Each request runs
`TorchDistributor(num_processes=N, local_mode=False, use_gpu=False).run(train_ddp, request)`: every
process reads its half of the dataset's train Parquet files with pyarrow (files[rank::N], the same
row groups petastorm gives that rank), holds them as tensors, and trains an MLP with DDP, Adam and one
torch thread, `steps` batches of `batch_per_rank` rows per epoch, each epoch in a fresh seeded order.
Rank 0 times every epoch (the all-reduce of the last step is finished when `step()` returns) and
returns the per-epoch samples/s of the whole group, as the trainer's own epoch records count them.

    benchmarks/.venv-baseline/bin/python benchmarks/baselines/ddp_train.py --request '{...}'

With --serve it prints `READY` after starting its session and then answers each `train <json>` line on
stdin with `TRAIN <json>` (`{"error": ...}` when the run failed) until `quit` (then `RESULT <json>` with
versions and peak RSS): the benchmark interleaves these runs with its own, so that both see the same load
on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from baseline_session import build_session


def train_ddp(request: dict) -> dict:
    """One DDP training run inside a TorchDistributor process; rank 0's return value comes back."""
    import datetime

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(request["threads"])
    # A peer that dies must fail this rank within minutes, not after gloo's default half hour.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=request.get("timeout_s", 180)))
    rank, size = dist.get_rank(), dist.get_world_size()

    files = sorted(request["files"])[rank::size]
    table = pa.concat_tables([pq.read_table(path, columns=["features", "label"]) for path in files])
    features = table.column("features").combine_chunks()
    x = torch.from_numpy(features.flatten().to_numpy().reshape(len(features), -1).astype(np.float32, copy=True))
    y = torch.from_numpy(table.column("label").to_numpy().astype(np.int64, copy=True))

    torch.manual_seed(request["seed"])
    layers: list[nn.Module] = []
    width = x.shape[1]
    for hidden in request["hidden"]:
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, request["classes"]))
    model = DistributedDataParallel(nn.Sequential(*layers))
    parameters = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=request["lr"] * size)  # linear scaling, as ours

    batch, steps = request["batch_per_rank"], request["steps"]
    records = []
    for epoch in range(request["epochs"]):
        generator = torch.Generator().manual_seed(request["seed"] * 1000 + epoch * 10 + rank)
        order = torch.randperm(len(x), generator=generator)
        dist.barrier()
        started = time.perf_counter()
        for step in range(steps):
            index = order[(step * batch) % len(x) :][:batch]
            if len(index) < batch:  # the shard ran out: wrap around, as the trainer's reader does
                index = torch.cat([index, order[: batch - len(index)]])
            loss = F.cross_entropy(model(x[index]), y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        elapsed = time.perf_counter() - started
        records.append(
            {
                "epoch": epoch + 1,
                "epoch_time": elapsed,
                "samples_per_sec": steps * batch * size / elapsed,
                "loss": float(loss.detach()),
            }
        )
    dist.destroy_process_group()
    return {
        "rank": rank,
        "size": size,
        "rows": len(x),
        "parameters": parameters,
        "history": records,
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def run_request(num_proc: int, request: dict) -> dict:
    from pyspark.ml.torch.distributor import TorchDistributor

    distributor = TorchDistributor(num_processes=num_proc, local_mode=False, use_gpu=False)
    called = time.time()
    out = distributor.run(train_ddp, request)
    if not out or out.get("size") != num_proc:
        raise RuntimeError(f"TorchDistributor returned {out!r}; expected rank 0's record from {num_proc} processes")
    return out | {"total_s": time.time() - called}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--request", help="one run's settings as JSON (without --serve)")
    parser.add_argument("--serve", action="store_true", help="run one request per 'train <json>' line on stdin")
    args = parser.parse_args(argv)

    import pyarrow
    import pyspark
    import torch

    spark = build_session(args.num_proc, "ddp_train_baseline")
    runs = 0
    try:
        if args.serve:
            print("READY", flush=True)
            for line in sys.stdin:
                command, _, payload = line.strip().partition(" ")
                if command == "quit":
                    break
                if command == "train":
                    try:
                        answer = run_request(args.num_proc, json.loads(payload))
                    except Exception as exc:  # one failed run is reported; the benchmark decides to retry
                        answer = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
                    print("TRAIN " + json.dumps(answer), flush=True)
                    runs += 1
        else:
            print("TRAIN " + json.dumps(run_request(args.num_proc, json.loads(args.request))), flush=True)
            runs += 1
    finally:
        spark.stop()
    print(
        "RESULT "
        + json.dumps(
            {
                "versions": {
                    "pyspark": pyspark.__version__,
                    "torch": torch.__version__,
                    "pyarrow": pyarrow.__version__,
                    "python": sys.version.split()[0],
                },
                "runs": runs,
                "driver_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
