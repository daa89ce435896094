"""Per-step profile of a communication-bound step: Horovod's DistributedOptimizer next to DDP, data in memory.

    .venv/bin/python -m benchmarks.train_steps                 # MLP 32-256-256-10, 128 rows per rank, 800 steps
    .venv/bin/python -m benchmarks.train_steps --env HOROVOD_CYCLE_TIME=5 --rounds 3

What the training benchmark's MLP row is made of, without the loader, the trainer's metrics or Spark
between epochs: every rank steps the same model on one in-memory batch, one torch thread, and times
forward + backward (Horovod's gradient hooks enqueue the all-reduces here; DDP runs its bucket
all-reduce here) and `optimizer.step()` (Horovod waits for its all-reduces here). Horovod ranks are
started by `sparkml_par.launch` (barrier stage, local[2]) as the trainer's are; the DDP ranks are two
plain processes joined by torch.distributed gloo on loopback. Variants:

- `hvd default`: `hvd.DistributedOptimizer` with Horovod's defaults (one all-reduce request per
  gradient tensor, fused by Horovod's background cycle);
- `hvd groups=1`: the same with `groups=1`, as sparkml_par.train.distributed builds it: all gradients
  go out as one grouped all-reduce, so one negotiation per step;
- `hvd groups=1 + stop vote`: the same, and after every step the trainer's SIGTERM agreement
  (`Preemption.requested()`, which every training step calls: an all-reduce of three numbers after every
  step where steps take 0.1 s or more, about every 0.1 s otherwise);
- `hvd <NAME=value>`: the default optimizer with each --env Horovod setting.

A last launch repeats `hvd groups=1` with Horovod's timeline on (benchmarks.horovod_timeline): its rows say how
much of the step is the wait from the first rank's all-reduce request to the last rank's (negotiation) and
how much is Gloo's all-reduce itself.

Mean ms per step over the steps after the first 50, rank 0, next to DDP's (lower is better), with the
medians of forward + backward and of the step; the rounds alternate the variants. Prints one table and
writes benchmarks/results/train_steps.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import entry
from benchmarks.horovod_timeline import median_phases, phase_durations
from benchmarks.memory import PeakMemory
from benchmarks.table import print_table, result_row

RESULTS_PATH = Path(__file__).resolve().parent / "results" / "train_steps.json"
HIDDEN = [256, 256]
SKIP = 50


def _model_and_data(batch: int):
    import torch

    from sparkml_par.models.registry import build_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model("mlp", {"hidden": HIDDEN}, input_shape=(32,), num_outputs=10)
    x, y = torch.randn(batch * 16, 32), torch.randint(0, 10, (batch * 16,))
    return model, x, y


def _timed_steps(model, optimizer, x, y, batch: int, steps: int, after_step=None) -> dict:
    import torch.nn.functional as F

    forward_backward, step, total = [], [], []
    for i in range(steps):
        start = (i % 16) * batch
        t0 = time.perf_counter()
        F.cross_entropy(model(x[start : start + batch]), y[start : start + batch]).backward()
        t1 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad()
        if after_step is not None:
            after_step()
        t2 = time.perf_counter()
        forward_backward.append(t1 - t0)
        step.append(t2 - t1)
        total.append(t2 - t0)
    return {
        "forward_backward_ms": 1e3 * statistics.median(forward_backward[SKIP:]),
        "step_ms": 1e3 * statistics.median(step[SKIP:]),
        "median_ms": 1e3 * statistics.median(total[SKIP:]),
        "mean_ms": 1e3 * statistics.mean(total[SKIP:]),
    }


def horovod_rank(batch: int, steps: int, groups: int | None, vote: bool = False) -> dict:
    import horovod.torch as hvd
    import torch

    from sparkml_par.train.preemption import Preemption

    model, x, y = _model_and_data(batch)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.Adam(model.parameters(), lr=1e-3),
        named_parameters=model.named_parameters(),
        op=hvd.Average,
        groups=groups,
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.barrier()
    with Preemption() as preemption:
        return _timed_steps(model, optimizer, x, y, batch, steps, preemption.requested if vote else None)


def _ddp_rank(rank: int, port: int, batch: int, steps: int, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    model, x, y = _model_and_data(batch)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    dist.barrier()
    out.put((rank, _timed_steps(model, optimizer, x, y, batch, steps)))
    dist.destroy_process_group()


def ddp(batch: int, steps: int) -> dict:
    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    context = mp.get_context("spawn")
    out = context.Queue()
    processes = [
        context.Process(target=_ddp_rank, args=(rank, port, batch, steps, out), daemon=True) for rank in range(2)
    ]
    for process in processes:
        process.start()
    results = dict(out.get(timeout=600) for _ in processes)
    for process in processes:
        process.join(30)
    return results[0]


def _grouped_step_phases(spark, batch: int, steps: int) -> dict[str, float]:
    """The groups=1 step once more with Horovod's timeline on: the median of each phase of the step's one
    grouped all-reduce (its first track; the group's tensors share the phases), the first SKIP steps left out.

    One timeline per process: Horovod 0.28.1 does not open a second timeline file in a Python worker
    that Spark reuses after an earlier one, so this runs last.
    """
    from sparkml_par import launch

    with tempfile.TemporaryDirectory(prefix="sparkml_par-timeline-") as tmp:
        path = Path(tmp) / "timeline.json"
        launcher = launch.Launcher(
            num_proc=2, spark=spark, env={"HOROVOD_TIMELINE": str(path)}, on_progress=lambda rank, record: None
        )
        launcher.run(horovod_rank, batch, steps, 1)
        durations = phase_durations(path)
        track = min(name for name in durations if name.startswith("grouped_allreduce."))
        return median_phases(durations, track, skip=SKIP)


def run(args: argparse.Namespace) -> list[dict]:
    from sparkml_par import launch
    from sparkml_par.config import SparkConfig
    from sparkml_par.spark_runtime.session import get_or_create_session

    env_variants = {}
    for pair in args.env:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("HOROVOD_"):
            raise SystemExit(f"--env {pair!r}: expected HOROVOD_NAME=value")
        env_variants[f"hvd {pair}"] = {key: value}
    spark, created = get_or_create_session(SparkConfig(master="local[2]", app_name="sparkml_par step profile"))
    runs: dict[str, list[dict]] = {
        "ddp (torch gloo)": [],
        "hvd default": [],
        "hvd groups=1": [],
        "hvd groups=1 + stop vote": [],
        **{name: [] for name in env_variants},
    }
    try:
        with PeakMemory() as memory:
            for round_index in range(args.rounds):
                print(f"round {round_index + 1}/{args.rounds} ...", flush=True)
                runs["ddp (torch gloo)"].append(ddp(args.batch, args.steps))
                for name, groups, env, vote in [
                    ("hvd default", None, {}, False),
                    ("hvd groups=1", 1, {}, False),
                    ("hvd groups=1 + stop vote", 1, {}, True),
                    *((name, None, env, False) for name, env in env_variants.items()),
                ]:
                    launcher = launch.Launcher(num_proc=2, spark=spark, env=env, on_progress=lambda rank, record: None)
                    records = launcher.run(horovod_rank, args.batch, args.steps, groups, vote)
                    runs[name].append(records[0])
            phases = _grouped_step_phases(spark, args.batch, args.steps)
    finally:
        if created:
            spark.stop()
    medians = {
        name: {key: statistics.median(r[key] for r in records) for key in records[0]} for name, records in runs.items()
    }
    baseline = medians.pop("ddp (torch gloo)")
    rows = [
        result_row(
            f"train_steps: MLP step, {name} (mean ms)",
            values["mean_ms"],
            baseline["mean_ms"],
            "DDP, torch gloo",
            "lower",
        )
        | memory.columns()
        for name, values in medians.items()
    ]
    step_ms = medians["hvd groups=1"]["mean_ms"]
    rows += [
        result_row(
            f"train_steps: MLP step, hvd groups=1, {what} (Horovod timeline, rank 0, ms)",
            phases[phase],
            step_ms,
            "the whole step, hvd groups=1",
            "lower",
        )
        | memory.columns()
        for phase, what in (
            ("NEGOTIATE_ALLREDUCE", "first rank's request to the last rank's"),
            ("GLOO_ALLREDUCE", "inside gloo::allreduce"),
        )
    ]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "settings": vars(args) | {"json": str(args.json)},
                "runs": runs,
                "medians": medians,
                "ddp": baseline,
                "hvd_groups_1_phases_ms": phases,
                "rows": rows,
            },
            indent=1,
        )
    )
    print_table(rows)
    print(
        "\nms per step, forward + backward / optimizer.step(): DDP "
        f"{baseline['forward_backward_ms']:.2f} / {baseline['step_ms']:.2f}; "
        + "; ".join(f"{name} {v['forward_backward_ms']:.2f} / {v['step_ms']:.2f}" for name, v in medians.items())
    )
    print(
        f"MLP 32-{'-'.join(map(str, HIDDEN))}-10, {args.batch} rows per rank, 2 ranks, 1 torch thread, in-memory "
        f"batches; rank 0, steps {SKIP + 1}..{args.steps}, median over {args.rounds} alternating rounds."
    )
    print(f"written: {args.json}")
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.train_steps", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--batch", type=int, default=128, help="rows per rank per step")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="HOROVOD_NAME=value",
        help="also time the default optimizer with this Horovod setting (repeatable)",
    )
    parser.add_argument("--json", type=Path, default=RESULTS_PATH)
    return parser


def _resolve(args: argparse.Namespace) -> str | None:
    if args.rounds < 1 or args.steps <= SKIP:
        return f"--rounds must be at least 1 and --steps above {SKIP}"
    return None


def main(argv: list[str] | None = None) -> int:
    return entry.main(argv, build_parser, run, _resolve)


if __name__ == "__main__":
    sys.exit(main())
