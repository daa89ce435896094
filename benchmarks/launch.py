"""Launcher benchmark: launch time and all-reduce bandwidth, side by side with the usual alternatives.

    python -m benchmarks.launch                     # 5 launches, all-reduce of 1/16/64 MB
    python -m benchmarks.launch --reps 9 --sizes-mb 16,64

Launch time: wall clock from calling `Launcher.run` on a warm SparkSession until every rank is past
`hvd.init()` (each rank reports `time.time()` as the function starts, which is right after init; driver
and ranks share one machine and one clock), next to pyspark's TorchDistributor running a function that
joins a gloo process group. TorchDistributor needs pyarrow >= 15 and petastorm needs < 15, so the
baseline runs in its own virtual environment (benchmarks/.venv-baseline, created once) and its own
Spark session, as a subprocess.

All-reduce: in-place Horovod all-reduce of float32 tensors inside one launch, next to
`torch.distributed` gloo `all_reduce` between two plain processes on loopback, and a single-process
tensor copy for scale. One more block runs with Horovod's timeline on (benchmarks.horovod_timeline), to say
how much of rank 0's call is Gloo's own all-reduce and how much Horovod's queueing, negotiation and copies.
Figures are algorithm bandwidth (bytes / time); every ratio compares figures
measured in the same run, medians of several repetitions (the machine is shared, timings are noisy).

Prints one table and writes benchmarks/results/launch.json.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import resource
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from benchmarks import entry
from benchmarks.baseline_venv import (
    LOOPBACK,
    BaselineUnavailable,
    TorchDistributorBaseline,
    baseline_step,
    ensure_baseline_venv,
)
from benchmarks.horovod_timeline import median_phases, phase_durations
from benchmarks.memory import PeakMemory
from benchmarks.rounds import rotating_rounds
from benchmarks.table import print_table, result_row

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_PATH = BENCH_DIR / "results" / "launch.json"
MB = 1 << 20
LAUNCH_TARGET = 0.3
ALLREDUCE_TARGET = 0.95
ALLREDUCE_TARGET_MIN_MB = 16


# ---------------------------------------------------------------------------------------------------------
# Functions that run inside the ranks (module level, so Spark and multiprocessing can import them)


def report_init_time() -> dict:
    """The trivial launched function: Horovod is up when it starts."""
    import horovod.torch as hvd

    return {
        "rank": hvd.rank(),
        "initialized": time.time(),
        "pid": os.getpid(),
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def time_horovod_allreduce(sizes_mb: list[int], reps: int) -> dict:
    """Seconds per in-place all-reduce for each size, every repetition started together on all ranks."""
    import horovod.torch as hvd
    import torch

    seconds: dict[str, list[float]] = {}
    for size_mb in sizes_mb:
        tensor = torch.ones(size_mb * MB // 4, dtype=torch.float32)
        name = f"bench.allreduce.{size_mb}"
        times = []
        for rep in range(reps + 1):  # the first one warms the response cache and the buffers
            hvd.barrier()
            started = time.perf_counter()
            hvd.allreduce_(tensor, op=hvd.Sum, name=name)
            if rep:
                times.append(time.perf_counter() - started)
        seconds[str(size_mb)] = times
    return {"rank": hvd.rank(), "seconds": seconds, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def _torch_gloo_rank(rank: int, world: int, port: int, iface: str, sizes_mb: list[int], reps: int, out) -> None:
    os.environ.update(MASTER_ADDR=LOOPBACK, MASTER_PORT=str(port), GLOO_SOCKET_IFNAME=iface)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # as in a Spark task with spark.task.cpus=1 (PySpark sets OMP_NUM_THREADS)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    seconds: dict[str, list[float]] = {}
    for size_mb in sizes_mb:
        tensor = torch.ones(size_mb * MB // 4, dtype=torch.float32)
        times = []
        for rep in range(reps + 1):
            dist.barrier()
            started = time.perf_counter()
            dist.all_reduce(tensor)
            if rep:
                times.append(time.perf_counter() - started)
        seconds[str(size_mb)] = times
    dist.destroy_process_group()
    out.put({"rank": rank, "seconds": seconds, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss})


# ---------------------------------------------------------------------------------------------------------
# Measurements


class _EventLog:
    """Times at which the driver received each rank's lifecycle events, per launch.

    The launcher keeps its driver channel to itself; for the phase breakdown the benchmark swaps in a
    subclass that notes the arrival time of every message before handling it as usual.
    """

    def __init__(self):
        self.launches: list[list[tuple[float, int, str]]] = []

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        import sparkml_par.launch.launcher as launch_module

        original = launch_module.DriverChannel
        launches = self.launches

        class RecordingChannel(original):
            def __init__(self, *args, **kwargs):
                self.events: list[tuple[float, int, str]] = []
                launches.append(self.events)
                super().__init__(*args, **kwargs)

            def _receive(self, message: dict, task_id: int = 0) -> None:
                self.events.append((time.time(), int(message.get("rank", -1)), str(message.get("type"))))
                super()._receive(message, task_id)

        launch_module.DriverChannel = RecordingChannel
        try:
            yield
        finally:
            launch_module.DriverChannel = original


def _phases(called: float, events: list[tuple[float, int, str]], rank_records: list[dict], returned: float) -> dict:
    """Seconds after the call at which the first or last rank reached each phase (rendezvous: rank 0)."""

    def last(kind: str) -> float | None:
        times = [t for t, _, k in events if k == kind]
        return max(times) - called if times else None

    def first(kind: str) -> float | None:
        times = [t for t, _, k in events if k == kind]
        return min(times) - called if times else None

    return {
        "first_task_started": first("started"),
        "all_tasks_started": last("started"),
        "rendezvous_up": last("rendezvous"),
        "all_joining": last("joining"),
        "first_initialized_seen_by_driver": first("initialized"),
        "all_initialized_seen_by_driver": last("initialized"),
        "all_past_init": max(r["initialized"] for r in rank_records) - called,
        "returned": returned - called,
    }


def time_our_launch(spark, num_proc: int, env: dict[str, str], events: _EventLog) -> dict:
    """One launch of the trivial function; phases in seconds after the call."""
    from sparkml_par import launch

    with events.installed():
        called = time.time()
        records = launch.Launcher(num_proc=num_proc, mode="barrier", spark=spark, env=env).run(report_init_time)
        returned = time.time()
    return _phases(called, events.launches[-1], records, returned) | {
        "rank_maxrss_kb": [r["maxrss_kb"] for r in records],
        "rank_pids": [r["pid"] for r in records],
    }


def measure_bare_barrier_stage(sc, num_proc: int, reps: int) -> dict:
    """The Spark floor under any barrier launcher: an empty barrier stage, and one with a single allGather."""

    def empty(_rows):
        yield time.time()

    def one_all_gather(_rows):
        from pyspark import BarrierTaskContext

        BarrierTaskContext.get().allGather("x")
        yield time.time()

    out = {}
    for name, fn in (("empty", empty), ("one_allGather", one_all_gather)):
        runs = []
        for rep in range(reps + 1):
            called = time.time()
            task_times = sc.parallelize(range(num_proc), num_proc).barrier().mapPartitions(fn).collect()
            returned = time.time()
            if rep:
                runs.append({"all_tasks_ran": max(task_times) - called, "returned": returned - called})
        out[name] = {"reps": runs, "median": _median_fields(runs)}
    return out


def time_horovod_allreduce_block(spark, num_proc: int, sizes_mb: list[int], reps: int, env: dict[str, str]) -> list:
    from sparkml_par import launch

    launcher = launch.Launcher(num_proc=num_proc, mode="barrier", spark=spark, env=env)
    return launcher.run(time_horovod_allreduce, sizes_mb, reps)


def time_horovod_allreduce_phases(spark, num_proc: int, sizes_mb: list[int], reps: int, env: dict[str, str]) -> dict:
    """One more block of Horovod all-reduces with Horovod's timeline on: per size, rank 0's median call and the
    median of each phase the timeline records for it (the first repetition, a warm-up, left out of both)."""
    with tempfile.TemporaryDirectory(prefix="sparkml_par-timeline-") as tmp:
        path = Path(tmp) / "timeline.json"
        records = time_horovod_allreduce_block(spark, num_proc, sizes_mb, reps, env | {"HOROVOD_TIMELINE": str(path)})
        durations = phase_durations(path)
        rank0 = next(r for r in records if r["rank"] == 0)
        return {
            str(size_mb): {
                "call_ms": statistics.median(rank0["seconds"][str(size_mb)]) * 1000,
                "phases_ms": median_phases(durations, f"allreduce.bench.allreduce.{size_mb}", skip=1),
            }
            for size_mb in sizes_mb
        }


def time_torch_gloo_allreduce_block(num_proc: int, sizes_mb: list[int], reps: int) -> list:
    import torch.multiprocessing as mp

    from sparkml_par.launch.horovod_backend import interface_for

    context = mp.get_context("spawn")
    out = context.Queue()
    port = _free_port()
    processes = [
        context.Process(
            target=_torch_gloo_rank,
            daemon=True,
            args=(rank, num_proc, port, interface_for(LOOPBACK), sizes_mb, reps, out),
        )
        for rank in range(num_proc)
    ]
    for process in processes:
        process.start()
    records = [out.get(timeout=600) for _ in processes]
    for process in processes:
        process.join(30)
    failed = [p.exitcode for p in processes if p.exitcode != 0]
    if failed:
        raise RuntimeError(f"torch.distributed gloo processes exited with {failed}")
    return sorted(records, key=lambda r: r["rank"])


def measure_copy(sizes_mb: list[int], reps: int) -> dict:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = {}
        for size_mb in sizes_mb:
            src = torch.ones(size_mb * MB // 4, dtype=torch.float32)
            dst = torch.empty_like(src)
            times = []
            for rep in range(reps + 1):
                started = time.perf_counter()
                dst.copy_(src)
                if rep:
                    times.append(time.perf_counter() - started)
            out[str(size_mb)] = {
                "median_s": statistics.median(times),
                "gb_per_s": size_mb * MB / statistics.median(times) / 1e9,
            }
        return out
    finally:
        torch.set_num_threads(threads)


GLOO = "torch.distributed gloo"


def _allreduce_summary(blocks: list[list[dict]], sizes_mb: list[int], num_proc: int) -> dict:
    """Per repetition the slowest rank counts (a collective ends when its last rank does); then the median
    over the repetitions of every block."""
    out: dict[str, Any] = {"rank_maxrss_kb": [r["maxrss_kb"] for records in blocks for r in records]}
    for size_mb in sizes_mb:
        key = str(size_mb)
        per_rep = [max(times) for records in blocks for times in zip(*(r["seconds"][key] for r in records))]
        median = statistics.median(per_rep)
        out[key] = {
            "median_s": median,
            "gb_per_s": size_mb * MB / median / 1e9,
            "min_s": min(per_rep),
            "max_s": max(per_rep),
            "samples": len(per_rep),
            "ranks": num_proc,
        }
    return out


# ---------------------------------------------------------------------------------------------------------
# The run, the table, the JSON


def run(args: argparse.Namespace) -> list[dict]:
    """Measures everything and returns the table's rows; the full record goes to args.json.

    Timings that are compared are interleaved (a TorchDistributor launch, then ours; blocks of torch gloo
    and of Horovod all-reduces, in an order that rotates each round), so both sides see the same load on a
    shared machine.
    """
    sizes_mb = sorted(set(args.sizes_mb))
    env = _horovod_env(args.horovod_env)
    tuned = _horovod_env([pair for pair in args.tuned.split(",") if pair.strip()])
    record: dict[str, Any] = {
        "settings": {
            "reps": args.reps,
            "allreduce_reps": args.allreduce_reps,
            "rounds": args.rounds,
            "sizes_mb": sizes_mb,
            "num_proc": args.num_proc,
            "horovod_env": env,
            "tuned_horovod_env": tuned,
        }
    }

    baseline = _start_baseline(args, record)  # its JVM starts and warms up while ours does
    from sparkml_par.config import SparkConfig
    from sparkml_par.spark_runtime.session import get_or_create_session

    spark, created = get_or_create_session(
        SparkConfig(master=f"local[{args.num_proc}]", app_name="sparkml_par launch benchmark")
    )
    try:
        with PeakMemory() as memory:
            events = _EventLog()
            print("timing launches ...", flush=True)
            record["our_launch_warmup"] = time_our_launch(spark, args.num_proc, env, events)
            ours, theirs = [], []
            baseline_step(baseline, record, lambda b: b.wait_ready())
            for _ in range(args.reps):
                if baseline is not None:
                    launched = baseline_step(baseline, record, lambda b: b.launch())
                    if launched is not None:
                        theirs.append(launched)
                ours.append(time_our_launch(spark, args.num_proc, env, events))
            record["our_launch"] = {"reps": ours, "median": _median_fields(ours)}
            if baseline is not None:
                summary = baseline_step(baseline, record, lambda b: b.close())
                if summary is not None and theirs:
                    summary.update(reps=theirs, median=_median_fields(theirs))
                    record["torch_distributor"] = summary

            print("timing all-reduce ...", flush=True)
            variants = {"launcher defaults": env}
            if tuned:
                variants[", ".join(f"{k}={v}" for k, v in tuned.items())] = env | tuned
            blocks: dict[str, Callable[[], list]] = {
                GLOO: functools.partial(time_torch_gloo_allreduce_block, args.num_proc, sizes_mb, args.allreduce_reps),
                **{
                    name: functools.partial(
                        time_horovod_allreduce_block, spark, args.num_proc, sizes_mb, args.allreduce_reps, variant_env
                    )
                    for name, variant_env in variants.items()
                },
            }
            measured = rotating_rounds(blocks, args.rounds)
            record["torch_gloo_allreduce"] = _allreduce_summary(measured.pop(GLOO), sizes_mb, args.num_proc)
            record["horovod_allreduce"] = {
                name: _allreduce_summary(runs, sizes_mb, args.num_proc) for name, runs in measured.items()
            }
            record["horovod_allreduce_phases"] = time_horovod_allreduce_phases(
                spark, args.num_proc, sizes_mb, args.allreduce_reps, env
            )
            record["copy"] = measure_copy(sizes_mb, args.allreduce_reps * args.rounds)
            record["bare_barrier_stage"] = measure_bare_barrier_stage(spark.sparkContext, args.num_proc, args.reps)
    finally:
        if baseline is not None:
            baseline.kill()
        if created:
            spark.stop()
    record["memory"] = memory.columns() | {"driver_python_peak_mb": memory.python_mb}

    rows = [row | memory.columns() for row in _rows(record, sizes_mb)]
    record["rows"] = rows
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=1))
    _print_report(rows, record)
    print(f"\nwritten: {args.json}")
    return rows


def _start_baseline(args: argparse.Namespace, record: dict) -> TorchDistributorBaseline | None:
    record["torch_distributor"] = None
    if args.skip_torch_distributor:
        record["torch_distributor_error"] = "skipped (--skip-torch-distributor)"
        return None
    try:
        python = ensure_baseline_venv(rebuild=args.rebuild_baseline_venv)
    except BaselineUnavailable as exc:
        record["torch_distributor_error"] = str(exc)
        print(f"TorchDistributor baseline unavailable: {exc}", file=sys.stderr)
        return None
    return TorchDistributorBaseline(python, args.num_proc)


def _rows(record: dict, sizes_mb: list[int]) -> list[dict]:
    ours, td = record["our_launch"]["median"], (record["torch_distributor"] or {}).get("median")
    rows = [
        result_row(
            "launch: call -> every rank past init (s)",
            ours["all_past_init"],
            td and td["init_s"],
            "TorchDistributor",
            "lower",
            f"<= {LAUNCH_TARGET:g}x",
            LAUNCH_TARGET,
        ),
        result_row(
            "launch: whole call, trivial fn (s)", ours["returned"], td and td["total_s"], "TorchDistributor", "lower"
        ),
    ]
    gloo, copy = record["torch_gloo_allreduce"], record["copy"]
    for variant, hvd in record["horovod_allreduce"].items():
        for size_mb in sizes_mb:
            key = str(size_mb)
            target = (
                (f">= {ALLREDUCE_TARGET:g}x", ALLREDUCE_TARGET) if size_mb >= ALLREDUCE_TARGET_MIN_MB else ("", None)
            )
            rows.append(
                result_row(
                    f"launch: all-reduce {size_mb} MB f32 ({variant}) (GB/s)",
                    hvd[key]["gb_per_s"],
                    gloo[key]["gb_per_s"],
                    "torch.distributed gloo",
                    "higher",
                    *target,
                )
            )
    for size_mb in sizes_mb:
        phases = record["horovod_allreduce_phases"][str(size_mb)]
        rows.append(
            result_row(
                f"launch: all-reduce {size_mb} MB f32, inside gloo::allreduce (Horovod timeline, rank 0, ms)",
                phases["phases_ms"]["GLOO_ALLREDUCE"],
                phases["call_ms"],
                "the whole hvd.allreduce_ call",
                "lower",
            )
        )
    for size_mb in sizes_mb:
        rows.append(
            result_row(
                f"launch: copy {size_mb} MB, one process (GB/s)", copy[str(size_mb)]["gb_per_s"], None, "", "higher"
            )
        )
    rank_rss = max(
        [kb for hvd in record["horovod_allreduce"].values() for kb in hvd["rank_maxrss_kb"]]
        + record["our_launch"]["reps"][-1]["rank_maxrss_kb"]
    )
    rows.append(
        result_row(
            "launch: peak RSS, driver Python (MB)",
            record["memory"]["driver_python_peak_mb"],
            td and record["torch_distributor"]["driver_maxrss_kb"] / 1024,
            "TorchDistributor driver",
            "lower",
        )
    )
    rows.append(
        result_row(
            "launch: peak RSS, largest rank (MB)",
            rank_rss / 1024,
            max(record["torch_gloo_allreduce"]["rank_maxrss_kb"]) / 1024,
            "torch.distributed gloo rank",
            "lower",
        )
    )
    return rows


def _print_report(rows: list[dict], record: dict) -> None:
    def fmt(value, spec=".3f"):
        return "-" if value is None else format(value, spec)

    print_table(rows)

    settings = record["settings"]
    print(
        f"\nmedians of {settings['reps']} launches each (after one warm-up), TorchDistributor and ours alternating; "
        f"all-reduce: {settings['rounds']} rounds x {settings['allreduce_reps']} per size, torch gloo and Horovod "
        f"blocks in rotating order, slowest rank per repetition; {settings['num_proc']} ranks on "
        f"local[{settings['num_proc']}], loopback, 1 torch thread per rank. Horovod settings for every launch: "
        f"{settings['horovod_env'] or 'launcher defaults'}; rows marked with a setting add it for that all-reduce"
    )
    if record.get("torch_distributor_error"):
        print(f"TorchDistributor baseline: {record['torch_distributor_error'].splitlines()[0]}")
    elif record["torch_distributor"]:
        versions = record["torch_distributor"]["versions"]
        print(
            "TorchDistributor ran in benchmarks/.venv-baseline: " + ", ".join(f"{k} {v}" for k, v in versions.items())
        )

    print("\nlaunch phases (median s after the call; 'last rank' unless noted):")
    phases = record["our_launch"]["median"]
    labels = [
        ("first_task_started", "first task running the rank wrapper"),
        ("all_tasks_started", "every task running the rank wrapper"),
        ("rendezvous_up", "rank 0's rendezvous server up"),
        ("all_joining", "every rank entering hvd.init()"),
        ("first_initialized_seen_by_driver", "driver has heard the first rank's 'initialized'"),
        ("all_past_init", "every rank past hvd.init() (rank clock)"),
        ("all_initialized_seen_by_driver", "driver has heard every 'initialized'"),
        ("returned", "Launcher.run returned"),
    ]
    for key, label in labels:
        print(f"  {fmt(phases.get(key))}  {label}")
    bare = record["bare_barrier_stage"]
    print(
        f"  Spark floor: empty barrier stage {fmt(bare['empty']['median']['all_tasks_ran'])} to tasks running, "
        f"{fmt(bare['empty']['median']['returned'])} returned; with one allGather "
        f"{fmt(bare['one_allGather']['median']['all_tasks_ran'])} / {fmt(bare['one_allGather']['median']['returned'])}"
    )
    if record["torch_distributor"]:
        td = record["torch_distributor"]["median"]
        print(
            f"  TorchDistributor: fn started {fmt(td['fn_start_s'])}, past init_process_group {fmt(td['init_s'])}, "
            f"returned {fmt(td['total_s'])}"
        )


def _median_fields(runs: list[dict]) -> dict:
    keys = [key for key, value in runs[0].items() if isinstance(value, (int, float))]
    return {key: statistics.median(r[key] for r in runs if r[key] is not None) for key in keys}


def _horovod_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("HOROVOD_"):
            raise SystemExit(f"--horovod-env {pair!r}: expected HOROVOD_NAME=value")
        env[key] = value
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes-mb {text!r}: expected whole megabytes, e.g. 1,16,64") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"--sizes-mb {text!r}: expected positive sizes, e.g. 1,16,64")
    return sizes


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.launch", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="timed launches per launcher, after one warm-up")
    parser.add_argument("--allreduce-reps", type=int, default=10, help="timed all-reduces per size and round")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="all-reduce rounds: a block of torch gloo and of each Horovod variant, in rotating order",
    )
    parser.add_argument("--sizes-mb", type=_sizes, default=[1, 16, 64], help="all-reduce sizes in MB (1,16,64)")
    parser.add_argument("--num-proc", type=int, default=2, help="ranks (and Spark task slots)")
    parser.add_argument(
        "--horovod-env",
        action="append",
        default=[],
        metavar="HOROVOD_NAME=value",
        help="extra Horovod setting for our ranks, e.g. HOROVOD_CYCLE_TIME=0.1 (repeatable)",
    )
    parser.add_argument(
        "--tuned",
        default="HOROVOD_CYCLE_TIME=0.1",
        metavar="NAME=value,...",
        help="a second set of all-reduce rows with these Horovod settings ('' for none)",
    )
    parser.add_argument("--skip-torch-distributor", action="store_true", help="leave out the TorchDistributor baseline")
    parser.add_argument("--rebuild-baseline-venv", action="store_true", help="recreate benchmarks/.venv-baseline")
    parser.add_argument("--json", type=Path, default=RESULTS_PATH, help="where to write the results")
    return parser


def _resolve(args: argparse.Namespace) -> str | None:
    if min(args.reps, args.allreduce_reps, args.rounds, args.num_proc) < 1:
        return "--reps, --allreduce-reps, --rounds and --num-proc must be at least 1"
    return None


def main(argv: list[str] | None = None) -> int:
    return entry.main(argv, build_parser, run, _resolve)


if __name__ == "__main__":
    sys.exit(main())
