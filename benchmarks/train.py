"""Training throughput: scaling of a compute-bound CNN, an MLP next to TorchDistributor + DDP, loader vs step.

    .venv/bin/python -m benchmarks.train                      # defaults: about 4 minutes on 2 idle cores
    .venv/bin/python -m benchmarks.train --rounds 3 --skip-torch-distributor
    .venv/bin/python -m benchmarks.train --mlp-variant "cycle 5ms:HOROVOD_CYCLE_TIME=5"

Every figure is samples/s from the trainer's own per-epoch records (`samples_per_sec`: train rows of all
ranks / epoch wall time on rank 0), the first epoch of every run left out as warm-up; the median over
the measured epochs of all rounds. One torch thread per rank everywhere (train.threads_per_rank=1).
The runs a figure is compared with take their places in a round in rotating order (benchmarks.rounds).

(i) CNN scaling: a ~1M-parameter CNN (conv 32, conv 64, linear 300; 28x28 single-channel input) on
    synthetic rows of 784 features, 128 rows per rank per step. The 1-process baseline is this trainer
    with train.num_proc=1 (the same barrier launch, Horovod with one rank, the same loader), so the ratio
    isolates what a second rank costs. The synthetic source writes feature_shape [784] into the manifest;
    the benchmark rewrites it to [1, 28, 28] in its own copy (the rows are the same flat 784 floats the
    CNN's first layer reshapes anyway). Efficiency = 2-rank samples/s / (2 x 1-process samples/s); the
    target is the machine's own ceiling less 0.05, measured in the same rounds (a row of its own): one and two
    independent one-thread torch processes stepping the same CNN on an in-memory batch (no Spark,
    Horovod or loader). On a shared 2-core machine the second core is rarely all ours.
(ii) MLP 32 -> 256 -> 256 -> 10 on 200,000 synthetic rows (communication-bound: ~1 ms of compute per
    step): our 2-rank trainer next to `TorchDistributor(num_processes=2, local_mode=False,
    use_gpu=False).run(fn)` where fn trains the same architecture with DDP (gloo), Adam at the same
    scaled learning rate, the same global batch and steps per epoch, on the same train rows read from the
    dataset's Parquet files with pyarrow (each process the same half petastorm gives that rank). The
    baseline runs in benchmarks/.venv-baseline (TorchDistributor needs pyarrow >= 15, petastorm < 15) in a
    process and Spark session of its own, its runs alternating with ours. Our side is measured with the
    launcher's defaults and with Horovod settings (`--mlp-variant`): HOROVOD_* values reach the ranks
    through `Launcher(env=...)`, which sets them before `hvd.init()`; train.* values are config
    overrides (train.fp16_compression, train.accumulation_steps = backward_passes_per_step, which
    changes the optimization: its row is marked). The default-settings row calls
    `sparkml_par.train.job.train`; rows with HOROVOD_* settings call what it calls
    (`Launcher(...).run(train_rank, build_train_job(...))`) with env added, since train() passes no
    environment to the ranks.
(iii) Loader alone vs training step alone, per rank: `ShardBatches` (rank 0 of 2, shuffle on, the
    trainer's defaults) iterated without training, next to forward + backward + Adam on one batch in
    memory (no all-reduce), one torch thread, interleaved, median of --reps; for both datasets. The loader
    is never the bottleneck when its samples/s is above the step's (ratio >= 1). Its share of a step,
    loader / (loader + step) time, is what reading adds to a rank that has one core.

Datasets are written once into --workdir and reused while their config is unchanged (not timed).
Prints one table and writes benchmarks/results/train.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks import entry
from benchmarks.baseline_venv import BaselineUnavailable, TorchDistributorBaseline, baseline_step, ensure_baseline_venv
from benchmarks.datasets import DEFAULT_WORKDIR, prepare_dataset, train_files
from benchmarks.memory import PeakMemory
from benchmarks.rounds import rotating_rounds
from benchmarks.table import print_table, result_row

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_PATH = BENCH_DIR / "results" / "train.json"
DDP_SCRIPT = BENCH_DIR / "baselines" / "ddp_train.py"
# The CNN's 2-rank scaling is to come within this of the machine's own 2-process scaling in the same run.
SCALING_SHORTFALL = 0.05
DDP_TARGET = 1.0
LOADER_TARGET = 1.0
CNN_ARGS = {"channels": [32, 64], "hidden": 300}
CNN_SHAPE = [1, 28, 28]
MLP_HIDDEN = [256, 256]
# The trainer without its step checkpoints (default: one every 1000 steps): what they cost beside it.
CHECKPOINTS_OFF = "step checkpoints off:train.checkpoint_every_steps=0"
DEFAULT_VARIANTS = ["HOROVOD_CYCLE_TIME=5", CHECKPOINTS_OFF]
# The MLP baseline's name among the rounds' runs.
DDP = "TorchDistributor + DDP"


# ---------------------------------------------------------------------------------------------------------
# Our trainer


def train_ours(spark, url: str, overrides: list[str], num_proc: int, env: dict[str, str], output: Path) -> list[dict]:
    """One training run; rank 0's per-epoch records."""
    from sparkml_par.config import load_config

    cfg = load_config(
        None,
        [
            f"data.output={url}",
            f"train.num_proc={num_proc}",
            "train.resume=never",
            "train.threads_per_rank=1",
            f"train.output={output}",
            *overrides,
        ],
    )
    try:
        if not env:
            from sparkml_par.train.job import train

            return train(spark, cfg).history
        from data_prep.manifest import read_manifest
        from sparkml_par import launch
        from sparkml_par.train.job import build_train_job
        from sparkml_par.train.loop import train_rank

        job = build_train_job(read_manifest(spark, url), url, cfg, num_proc)
        launcher = launch.Launcher(
            num_proc=num_proc,
            mode="barrier",
            timeout=cfg.train.timeout,
            progress_timeout=cfg.train.step_timeout,
            spark=spark,
            env=env,
            on_progress=lambda rank, record: None,
        )
        results = launcher.run(train_rank, job)
        return results[0]["history"]
    finally:
        shutil.rmtree(output, ignore_errors=True)


def measured(history: list[dict], warmup: int = 1) -> list[float]:
    return [record["samples_per_sec"] for record in history[warmup:]]


def parse_variant(text: str) -> tuple[str, dict[str, str], list[str]]:
    """'[label:]HOROVOD_X=1,train.y=2' -> (label, Horovod env, train overrides)."""
    label, sep, settings = text.partition(":")
    if not sep or "=" in label:
        label, settings = "", text
    env, overrides = {}, []
    for pair in (p.strip() for p in settings.split(",") if p.strip()):
        key, eq, value = pair.partition("=")
        if not eq:
            raise SystemExit(f"--mlp-variant {text!r}: {pair!r} is not NAME=value")
        if key.startswith("HOROVOD_"):
            env[key] = value
        elif key.startswith("train."):
            overrides.append(pair)
        else:
            raise SystemExit(f"--mlp-variant {text!r}: {key!r} is neither a HOROVOD_* variable nor a train.* key")
    return label or settings, env, overrides


# ---------------------------------------------------------------------------------------------------------
# The DDP baseline in its own virtual environment


class DdpBaseline(TorchDistributorBaseline):
    """benchmarks/baselines/ddp_train.py in --serve mode: one TorchDistributor + DDP run per request."""

    def __init__(self, python: Path, num_proc: int, timeout: float = 400):
        # The launcher benchmark's client, pointed at this baseline's script (same venv, same protocol).
        super().__init__(python, num_proc, timeout, script=DDP_SCRIPT)

    def train(self, request: dict, attempts: int = 2) -> dict:
        """One run; a failed one (a gloo peer aborting on a busy machine happens) is tried again once."""
        for attempt in range(attempts):
            self._send("train " + json.dumps(request))
            answer = json.loads(self._expect("TRAIN "))
            if "error" not in answer:
                return answer
            print(
                f"TorchDistributor + DDP run failed (attempt {attempt + 1}): {answer['error'][:300]}", file=sys.stderr
            )
        raise BaselineUnavailable(f"TorchDistributor + DDP failed {attempts} times: {answer['error']}")


def start_baseline(args: argparse.Namespace, record: dict) -> DdpBaseline | None:
    if args.skip_torch_distributor:
        record["ddp_error"] = "skipped (--skip-torch-distributor)"
        return None
    try:
        return DdpBaseline(ensure_baseline_venv(), 2)
    except BaselineUnavailable as exc:
        record["ddp_error"] = str(exc)
        print(f"TorchDistributor baseline unavailable: {exc}", file=sys.stderr)
        return None


def baseline_call(baseline: DdpBaseline | None, record: dict, step):
    return baseline_step(baseline, record, step, error_key="ddp_error")


# ---------------------------------------------------------------------------------------------------------
# The machine's own ceiling: plain torch processes, no Spark, no Horovod, no loader


def _plain_steps_worker(spec: dict, batch: int, seconds: float, ready, start, out) -> None:
    import torch
    import torch.nn.functional as F

    from sparkml_par.models.registry import build_from_spec

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_from_spec(spec)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(batch, *spec["input_shape"]).reshape(batch, -1)
    y = torch.randint(0, spec["num_outputs"], (batch,))
    for _ in range(2):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    ready.put(True)
    start.wait()
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        steps += 1
    out.put(steps * batch / (time.perf_counter() - started))


def plain_processes(spec: dict, batch: int, processes: int, seconds: float) -> float:
    """Total samples/s of `processes` independent one-thread torch processes stepping the model together."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    ready, out, start = context.Queue(), context.Queue(), context.Event()
    workers = [
        context.Process(target=_plain_steps_worker, args=(spec, batch, seconds, ready, start, out), daemon=True)
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.get(timeout=300)
    start.set()
    total = sum(out.get(timeout=300) for _ in workers)
    for worker in workers:
        worker.join(30)
    return total


# ---------------------------------------------------------------------------------------------------------
# Loader alone, step alone


def time_loader(url: str, manifest: dict, batch: int, steps: int) -> float:
    """Seconds for rank 0 of 2 to draw `steps` shuffled batches from its shard, nothing else."""
    from sparkml_par.config import TrainConfig
    from sparkml_par.train.data import ShardBatches

    defaults = TrainConfig()
    loader = ShardBatches(
        f"{url}/{manifest['splits']['train']['path']}",
        0,
        2,
        batch,
        label=manifest["label_column"],
        shuffle=True,
        seed=defaults.seed,
        shuffle_buffer=defaults.shuffle_buffer,
    )
    started = time.perf_counter()
    drawn = sum(1 for _ in loader.epoch(1, steps))
    elapsed = time.perf_counter() - started
    if drawn != steps:
        raise RuntimeError(f"the loader gave {drawn} batches, expected {steps}")
    return elapsed


def time_steps(spec: dict, batch: int, steps: int) -> float:
    """Seconds for `steps` forward + backward + Adam steps on one in-memory batch, one torch thread."""
    import torch
    import torch.nn.functional as F

    from sparkml_par.models.registry import build_from_spec

    torch.manual_seed(0)
    model = build_from_spec(spec)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(batch, *spec["input_shape"]).reshape(batch, -1)
    y = torch.randint(0, spec["num_outputs"], (batch,))
    for _ in range(2):  # allocator and kernels warm
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    started = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return time.perf_counter() - started


@contextlib.contextmanager
def torch_threads(count: int):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def loader_vs_step(
    name: str, url: str, manifest: dict, spec: dict, batch: int, loader_steps: int, step_steps: int, reps: int
) -> dict:
    loader_s, step_s = [], []
    with torch_threads(1):
        for _ in range(reps):
            loader_s.append(time_loader(url, manifest, batch, loader_steps) / loader_steps)
            step_s.append(time_steps(spec, batch, step_steps) / step_steps)
    loader, step = statistics.median(loader_s), statistics.median(step_s)
    return {
        "name": name,
        "batch": batch,
        "loader_s_per_batch": loader_s,
        "step_s_per_batch": step_s,
        "loader_samples_per_sec": batch / loader,
        "step_samples_per_sec": batch / step,
        "loader_share": loader / (loader + step),
    }


# ---------------------------------------------------------------------------------------------------------
# The run, the table, the JSON


def run(args: argparse.Namespace) -> list[dict]:
    """Measures everything and returns the table's rows; the full record goes to args.json."""
    from sparkml_par.config import SparkConfig
    from sparkml_par.models.registry import model_spec
    from sparkml_par.spark_runtime.session import get_or_create_session
    from sparkml_par.train.loop import steps_per_epoch

    variants = [parse_variant(text) for text in args.mlp_variant]
    record: dict[str, Any] = {
        "settings": {
            "rounds": args.rounds,
            "reps": args.reps,
            "plain_seconds": args.plain_seconds,
            "cnn_rows": args.cnn_rows,
            "cnn_epochs": args.cnn_epochs,
            "cnn_batch_per_rank": args.cnn_batch,
            "cnn_args": CNN_ARGS,
            "mlp_rows": args.mlp_rows,
            "mlp_epochs": args.mlp_epochs,
            "mlp_batch_per_rank": args.mlp_batch,
            "mlp_hidden": MLP_HIDDEN,
            "mlp_variants": [{"label": label, "env": env, "overrides": over} for label, env, over in variants],
        }
    }
    baseline = start_baseline(args, record)  # its JVM starts while ours does and the data is written
    spark, created = get_or_create_session(SparkConfig(master="local[2]", app_name="sparkml_par train benchmark"))
    scratch = Path(tempfile.mkdtemp(prefix="train-bench-"))
    try:
        with PeakMemory() as memory:
            print("datasets ...", flush=True)
            mlp_url, mlp_manifest = prepare_dataset(
                spark, args.workdir, f"synthetic-{args.mlp_rows}x32", args.mlp_rows, 32
            )
            cnn_url, cnn_manifest = prepare_dataset(
                spark, args.workdir, f"synthetic-{args.cnn_rows}x784", args.cnn_rows, 784, feature_shape=CNN_SHAPE
            )
            mlp_train_rows, cnn_train_rows = (m["splits"]["train"]["rows"] for m in (mlp_manifest, cnn_manifest))
            cnn_spec = model_spec("cnn", CNN_ARGS, tuple(CNN_SHAPE), 10)
            mlp_spec = model_spec("mlp", {"hidden": MLP_HIDDEN}, (32,), 10)
            record["datasets"] = {
                "mlp": {"url": mlp_url, "train_rows": mlp_train_rows},
                "cnn": {"url": cnn_url, "train_rows": cnn_train_rows, "feature_shape": cnn_manifest["feature_shape"]},
            }

            def run_id() -> Path:
                return Path(tempfile.mkdtemp(prefix="run-", dir=scratch))

            # (i) CNN: one process and two ranks, ours and plain torch, in rounds of rotating order.
            cnn_common = [
                "train.model=cnn",
                f"train.model_args={json.dumps(CNN_ARGS)}",
                f"train.epochs={args.cnn_epochs}",
            ]

            def cnn_run(num_proc: int) -> Callable[[], list]:
                overrides = [*cnn_common, f"train.batch_size={args.cnn_batch * num_proc}"]
                return lambda: train_ours(spark, cnn_url, overrides, num_proc, {}, run_id())

            def plain_run(processes: int) -> Callable[[], float]:
                return lambda: plain_processes(cnn_spec, args.cnn_batch, processes, args.plain_seconds)

            cnn = rotating_rounds(
                {"1": cnn_run(1), "2": cnn_run(2), "plain 1": plain_run(1), "plain 2": plain_run(2)}, args.rounds, "CNN"
            )
            record["cnn_plain_torch"] = {n: cnn.pop(f"plain {n}") for n in ("1", "2")}
            record["cnn"] = {
                n: {"histories": h, "measured": [v for history in h for v in measured(history)]} for n, h in cnn.items()
            }

            # (ii) MLP: the DDP baseline and ours with each setting, in rounds of rotating order.
            global_batch = args.mlp_batch * 2
            steps = steps_per_epoch(mlp_train_rows, global_batch, 1)
            request = {
                "files": train_files(mlp_url, mlp_manifest),
                "hidden": MLP_HIDDEN,
                "classes": 10,
                "batch_per_rank": args.mlp_batch,
                "steps": steps,
                "epochs": args.mlp_epochs,
                "lr": 1e-3,
                "seed": 0,
                "threads": 1,
                "timeout_s": 180,
            }
            mlp_common = [
                "train.model=mlp",
                f"train.model_args={json.dumps({'hidden': MLP_HIDDEN})}",
                f"train.epochs={args.mlp_epochs}",
                f"train.batch_size={global_batch}",
            ]
            settings = [("launcher defaults", {}, [])] + variants

            def mlp_run(env: dict, overrides: list) -> Callable[[], list]:
                return lambda: train_ours(spark, mlp_url, [*mlp_common, *overrides], 2, env, run_id())

            baseline_call(baseline, record, lambda b: b.wait_ready())
            ours = rotating_rounds(
                {
                    DDP: lambda: baseline_call(baseline, record, lambda b: b.train(request)),
                    **{label: mlp_run(env, overrides) for label, env, overrides in settings},
                },
                args.rounds,
                "MLP",
            )
            ddp = [out for out in ours.pop(DDP) if out is not None]
            record["mlp"] = {
                label: {"histories": h, "measured": [v for history in h for v in measured(history)]}
                for label, h in ours.items()
            }
            record["ddp"] = None
            if ddp:
                record["ddp"] = {"runs": ddp, "measured": [v for out in ddp for v in measured(out["history"])]}
            if baseline is not None:
                summary = baseline_call(baseline, record, lambda b: b.close())
                if summary is not None:
                    record["ddp_process"] = summary

            # (iii) Loader alone vs step alone, per rank.
            print("loader vs step ...", flush=True)
            record["loader_vs_step"] = [
                loader_vs_step("MLP", mlp_url, mlp_manifest, mlp_spec, args.mlp_batch, min(steps, 400), 400, args.reps),
                loader_vs_step(
                    "CNN",
                    cnn_url,
                    cnn_manifest,
                    cnn_spec,
                    args.cnn_batch,
                    steps_per_epoch(cnn_train_rows, args.cnn_batch * 2, 1),
                    5,
                    args.reps,
                ),
            ]
    finally:
        if baseline is not None:
            baseline.kill()
        if created:
            spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    record["memory"] = memory.columns()

    rows = [row | memory.columns() for row in build_rows(record, settings)]
    record["rows"] = rows
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=1))
    print_report(rows, record)
    print(f"\nwritten: {args.json}")
    return rows


def build_rows(record: dict, settings: list[tuple[str, dict, list]]) -> list[dict]:
    median = statistics.median
    one, two = median(record["cnn"]["1"]["measured"]), median(record["cnn"]["2"]["measured"])
    plain_one, plain_two = median(record["cnn_plain_torch"]["1"]), median(record["cnn_plain_torch"]["2"])
    ceiling = plain_two / (2 * plain_one)
    rows = [
        _row(
            "train: (i) CNN ~1M params, 2 ranks vs 2 x 1 process (samples/s)",
            two,
            2 * one,
            "2 x our trainer, num_proc=1",
            f">= {ceiling - SCALING_SHORTFALL:.2f} (the machine's {ceiling:.2f} - {SCALING_SHORTFALL:g})",
            ceiling - SCALING_SHORTFALL,
        ),
        _row(
            "train: (i) the machine: 2 plain torch processes vs 2 x 1, same CNN step (samples/s)",
            plain_two,
            2 * plain_one,
            "2 x 1 plain process",
            "",
            None,
        ),
    ]
    ddp = median(record["ddp"]["measured"]) if record.get("ddp") else None
    for label, _, overrides in settings:
        changes_math = any(o.startswith("train.accumulation_steps=") for o in overrides)
        rows_k = f"{record['settings']['mlp_rows'] / 1000:g}k"
        name = f"train: (ii) MLP {rows_k} rows, 2 ranks, {label}"
        name += " [larger effective batch]" if changes_math else ""
        rows.append(
            _row(
                name + " (samples/s)",
                median(record["mlp"][label]["measured"]),
                ddp,
                "TorchDistributor + DDP",
                f">= {DDP_TARGET:g}",
                None if changes_math else DDP_TARGET,
            )
        )
    for item in record["loader_vs_step"]:
        rows.append(
            _row(
                f"train: (iii) {item['name']} loader alone vs step alone, per rank (samples/s)",
                item["loader_samples_per_sec"],
                item["step_samples_per_sec"],
                "fwd+bwd+Adam, 1 thread",
                f">= {LOADER_TARGET:g}",
                LOADER_TARGET,
            )
        )
    return rows


def _row(
    part: str, ours: float, baseline: float | None, baseline_name: str, target: str, target_ratio: float | None
) -> dict:
    return result_row(part, ours, baseline, baseline_name, "higher", target if target_ratio else "", target_ratio)


def print_report(rows: list[dict], record: dict) -> None:
    def fmt(value, spec=",.0f"):
        return "-" if value is None else format(value, spec)

    print_table(rows)

    s = record["settings"]
    print(
        f"\nsamples/s: median over epochs 2..N of {s['rounds']} rounds of rotating order (epoch 1 of every run is "
        f"warm-up), from rank 0's epoch records; 1 torch thread per rank, local[2], loopback."
    )
    print(
        f"(i) {record['datasets']['cnn']['train_rows']} train rows, {s['cnn_epochs']} epochs, "
        f"{s['cnn_batch_per_rank']} rows per rank per step; per run: "
        + "; ".join(f"{n} rank(s) " + ", ".join(fmt(v) for v in record["cnn"][n]["measured"]) for n in ("1", "2"))
    )
    print(
        "    the machine's ceiling: independent one-thread torch processes stepping the same CNN, no Spark, "
        "Horovod or loader: 1 process "
        + ", ".join(fmt(v) for v in record["cnn_plain_torch"]["1"])
        + "; 2 processes together "
        + ", ".join(fmt(v) for v in record["cnn_plain_torch"]["2"])
        + " samples/s. Our scaling relative to that ceiling: "
        + f"{rows[0]['ratio'] / rows[1]['ratio']:.2f}"
    )
    print(
        f"(ii) {record['datasets']['mlp']['train_rows']} train rows, {s['mlp_epochs']} epochs, "
        f"{s['mlp_batch_per_rank']} rows per rank per step; measured epochs: "
        + "; ".join(f"{label} " + ", ".join(fmt(v) for v in item["measured"]) for label, item in record["mlp"].items())
        + ("; DDP " + ", ".join(fmt(v) for v in record["ddp"]["measured"]) if record.get("ddp") else "")
    )
    if record.get("ddp_error"):
        print(f"    TorchDistributor baseline: {record['ddp_error'].splitlines()[0]}")
    elif record.get("ddp_process"):
        versions = record["ddp_process"]["versions"]
        print(
            "    TorchDistributor ran in benchmarks/.venv-baseline: "
            + ", ".join(f"{k} {v}" for k, v in versions.items())
        )
    for item in record["loader_vs_step"]:
        print(
            f"(iii) {item['name']}: loader {1e3 * statistics.median(item['loader_s_per_batch']):.2f} ms, step "
            f"{1e3 * statistics.median(item['step_s_per_batch']):.2f} ms per batch of {item['batch']}; reading is "
            f"{100 * item['loader_share']:.0f}% of loader + step on one core"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.train", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every run, in rotating order")
    parser.add_argument("--reps", type=int, default=3, help="loader / step repetitions, interleaved")
    parser.add_argument("--cnn-rows", type=int, default=8000, help="synthetic 28x28 rows of the CNN dataset")
    parser.add_argument("--cnn-epochs", type=int, default=2, help="epochs per CNN run (the first is warm-up)")
    parser.add_argument("--cnn-batch", type=int, default=128, help="CNN rows per rank per step")
    parser.add_argument(
        "--plain-seconds",
        type=float,
        default=4.0,
        help="seconds of each plain-torch run that measures the machine's own 2-process scaling",
    )
    parser.add_argument("--mlp-rows", type=int, default=200_000, help="synthetic rows of the MLP dataset")
    parser.add_argument("--mlp-epochs", type=int, default=2, help="epochs per MLP run (the first is warm-up)")
    parser.add_argument("--mlp-batch", type=int, default=128, help="MLP rows per rank per step")
    parser.add_argument(
        "--mlp-variant",
        action="append",
        default=None,
        metavar="[LABEL:]NAME=value,...",
        help="our MLP runs with these HOROVOD_* variables / train.* overrides besides the launcher "
        f"defaults (repeatable; default {DEFAULT_VARIANTS}; 'none' for defaults only)",
    )
    parser.add_argument("--skip-torch-distributor", action="store_true", help="leave out the DDP baseline")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="where the datasets are kept")
    parser.add_argument("--json", type=Path, default=RESULTS_PATH, help="where to write the results")
    return parser


def _resolve(args: argparse.Namespace) -> str | None:
    if min(args.rounds, args.reps) < 1 or args.cnn_epochs < 2 or args.mlp_epochs < 2:
        return "--rounds and --reps must be at least 1, --cnn-epochs and --mlp-epochs at least 2"
    if args.mlp_variant is None:
        args.mlp_variant = list(DEFAULT_VARIANTS)
    args.mlp_variant = [v for v in args.mlp_variant if v != "none"]
    return None


def main(argv: list[str] | None = None) -> int:
    return entry.main(argv, build_parser, run, _resolve)


if __name__ == "__main__":
    sys.exit(main())
