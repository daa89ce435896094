"""What each Horovod rank runs: read its shard, train with ring all-reduce, validate, checkpoint.

`train_rank(job)` is handed to the launcher; Horovod is already initialized when it starts. The
loop is train() -> train_epoch() -> forward_backward(); its state (model, optimizer, schedule, early
stopping, scaler, RNG of every rank, history) is saved as one checkpoint by rank 0 and restored and
broadcast on resume, so a resumed run ends with the same weights as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sparkml_par import faults
from sparkml_par.config import TrainConfig
from sparkml_par.contract import MODEL_DIR, TRAIN_METRICS
from sparkml_par.errors import ConfigError
from sparkml_par.launch import current_rank
from sparkml_par.models.registry import build_from_spec
from sparkml_par.parallel.pipeline import PipelineModel
from sparkml_par.train import distributed
from sparkml_par.train.artifact import write_model_artifact
from sparkml_par.train.checkpoint import (capture_rng_state, load_latest_checkpoint, restore_rng_state,
                                          write_checkpoint_atomically)
from sparkml_par.train.data import ShardBatches
from sparkml_par.train.early_stopping import EarlyStopping
from sparkml_par.train.metrics import classification_sums, finalize, regression_sums, zero_sums
from sparkml_par.train.optim import build_optimizer, build_scheduler, scaled_lr


@dataclass(frozen=True)
class TrainJob:
    """Plain values every rank needs (the barrier closure captures it: no sessions, no open handles)."""
    train: TrainConfig
    splits: dict[str, str]          # split name -> dataset URL
    label: str                      # the dataset's label column
    split_rows: dict[str, int]
    task: str
    model_spec: dict[str, Any]
    fingerprint: dict[str, Any]
    output: str                     # local or mounted directory shared by rank 0 and the driver
    description: dict[str, Any]     # dataset facts stored in the artifact for scoring
    config_yaml: str
    use_gpu: bool = False


@dataclass
class _State:
    epoch: int = 0
    global_step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)


def steps_per_epoch(train_rows: int, batch_size: int, accumulation_steps: int) -> int:
    """Batches per epoch, the same on every rank: whole global batches, a multiple of the accumulation."""
    batches = max(1, train_rows // batch_size)
    return max(accumulation_steps, batches - batches % accumulation_steps)


def train_rank(job: TrainJob) -> dict[str, Any]:
    cfg = job.train
    torch.set_num_threads(cfg.threads_per_rank)
    rank, size = distributed.rank(), distributed.size()
    device = torch.device("cuda") if job.use_gpu and torch.cuda.is_available() else torch.device("cpu")
    _check_precision(cfg, device)

    torch.manual_seed(cfg.seed)  # the same initial weights everywhere (rank 0's are broadcast anyway)
    base = build_from_spec(job.model_spec).to(device)
    if cfg.sync_batchnorm:
        base = distributed.convert_sync_batchnorm(base)
    model = _maybe_pipeline(base, cfg, device)
    torch.manual_seed(cfg.seed * 1000 + rank)  # dropout differs per rank, reproducibly

    per_rank_batch = max(1, cfg.batch_size // size)
    steps = steps_per_epoch(job.split_rows["train"], per_rank_batch * size, cfg.accumulation_steps)
    optimizer = distributed.distributed_optimizer(
        build_optimizer(model.named_parameters(), cfg, scaled_lr(cfg, size)), model,
        cfg.fp16_compression, cfg.accumulation_steps)
    schedule = build_scheduler(optimizer, cfg, steps // cfg.accumulation_steps)
    stopper = EarlyStopping.from_config(cfg.early_stopping)
    scaler = torch.amp.GradScaler("cuda") if cfg.precision == "fp16" else None
    state = _resume(job, base, optimizer, schedule, stopper, scaler, rank)
    distributed.broadcast_training_state(base, optimizer)

    label_dtype = torch.int64 if job.task == "classification" else torch.float32
    train_data = ShardBatches(job.splits["train"], rank, size, per_rank_batch, label=job.label, shuffle=cfg.shuffle,
                              seed=cfg.seed, shuffle_buffer=cfg.shuffle_buffer, cache=cfg.cache, label_dtype=label_dtype)
    evaluators = {name: ShardBatches(job.splits[name], rank, size, per_rank_batch, label=job.label, shuffle=False,
                                     seed=cfg.seed, cache=cfg.cache, label_dtype=label_dtype)
                  for name in ("validation", "test") if job.split_rows.get(name, 0) >= size}

    output = Path(job.output)
    max_steps_reached = False
    for epoch in range(state.epoch, cfg.epochs):
        started = time.perf_counter()
        model.train()
        train_sums, max_steps_reached = _train_epoch(model, optimizer, schedule, scaler, train_data, epoch, steps,
                                                     cfg, job.task, device, state)
        record = {"epoch": epoch + 1, **{f"train_{k}": v for k, v in train_sums.items() if k != "samples"}}
        if "validation" in evaluators:
            record.update({f"val_{k}": v for k, v in _evaluate(model, evaluators["validation"], job.task,
                                                               device, cfg).items() if k != "samples"})
        elapsed = time.perf_counter() - started
        record.update({"lr": schedule.current_lr(), "epoch_time": elapsed,
                       "samples_per_sec": train_sums["samples"] / elapsed, "step": state.global_step})
        monitored = _monitored_value(record, cfg)
        schedule.step_epoch(monitored)
        stop = stopper.update(monitored) if monitored is not None else False
        # One decision for all ranks, even if floating point ever differed between them.
        stop = distributed.broadcast_object(stop, "early_stop")
        state.history.append(record)
        state.epoch = epoch + 1
        _report(record)
        last = stop or max_steps_reached or state.epoch == cfg.epochs
        if state.epoch % cfg.checkpoint_every == 0 or last:
            _checkpoint(job, base, optimizer, schedule, stopper, scaler, state, rank)
        if rank == 0:
            _write_metrics(output / TRAIN_METRICS, state.history)
        if stop or max_steps_reached:
            break

    test_metrics = (_evaluate(model, evaluators["test"], job.task, device, cfg)
                    if "test" in evaluators else {})
    result = {"rank": rank, "epochs_run": state.epoch, "global_step": state.global_step}
    if rank == 0:
        metrics = {"history": state.history, "test": test_metrics,
                   "stopped_early": bool(state.history) and state.epoch < cfg.epochs and not max_steps_reached}
        artifact = write_model_artifact(output / MODEL_DIR, base.state_dict(), job.description, metrics,
                                        job.config_yaml)
        result.update(metrics, artifact=str(artifact))
    return result


def _train_epoch(model, optimizer, schedule, scaler, data: ShardBatches, epoch: int, steps: int, cfg: TrainConfig,
                 task: str, device: torch.device, state: _State) -> tuple[dict[str, float], bool]:
    sums = zero_sums(task, device)
    context = current_rank()
    for index, (x, y) in enumerate(data.epoch(epoch, steps)):
        if context is not None:
            context.heartbeat()
            faults.kill_if_planned(context.slot.rank, epoch + 1, index + 1)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        sums += _forward_backward(model, x, y, task, cfg, scaler, device)
        if (index + 1) % cfg.accumulation_steps == 0:
            _optimizer_step(model, optimizer, scaler, cfg)
            schedule.step_batch()
            state.global_step += 1
            if cfg.max_steps and state.global_step >= cfg.max_steps:
                return finalize(distributed.allreduce_sum(sums, "train_sums")), True
    return finalize(distributed.allreduce_sum(sums, "train_sums")), False


def _forward_backward(model, x, y, task: str, cfg: TrainConfig, scaler, device: torch.device) -> torch.Tensor:
    with _autocast(cfg, device):
        out = model(x)
        loss = _loss(out, y, task)
    scaled = loss / cfg.accumulation_steps
    (scaler.scale(scaled) if scaler is not None else scaled).backward()
    return _sums(out.float(), y, task)


def _optimizer_step(model: nn.Module, optimizer, scaler, cfg: TrainConfig) -> None:
    if cfg.grad_clip > 0:
        # Clip the averaged gradient: finish the all-reduce first, then step without a second one.
        optimizer.synchronize()
        if scaler is not None:
            scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        with optimizer.skip_synchronize():
            _step(optimizer, scaler)
    else:
        _step(optimizer, scaler)
    optimizer.zero_grad()


def _step(optimizer, scaler) -> None:
    if scaler is None:
        optimizer.step()
    else:
        scaler.step(optimizer)
        scaler.update()


@torch.no_grad()
def _evaluate(model, data: ShardBatches, task: str, device: torch.device, cfg: TrainConfig) -> dict[str, float]:
    model.eval()
    sums = zero_sums(task, device)
    for x, y in data.all_rows():
        x, y = x.to(device), y.to(device)
        with _autocast(cfg, device):
            out = model(x)
        sums += _sums(out.float(), y, task)
    model.train()
    return finalize(distributed.allreduce_sum(sums, "eval_sums"))


def _loss(out: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    if task == "classification":
        return F.cross_entropy(out, y)
    return F.mse_loss(out.reshape(y.shape[0], -1), y.reshape(y.shape[0], -1).to(out.dtype))


def _sums(out: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    return classification_sums(out, y) if task == "classification" else regression_sums(out, y)


def _autocast(cfg: TrainConfig, device: torch.device):
    if cfg.precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if cfg.precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def _check_precision(cfg: TrainConfig, device: torch.device) -> None:
    if cfg.precision == "fp16" and device.type != "cuda":
        raise ConfigError("train.precision=fp16 needs GPU ranks (its gradient scaler is CUDA-only); "
                          "use train.precision=bf16 on CPUs, or set spark.use_gpu=true")


def _maybe_pipeline(model: nn.Module, cfg: TrainConfig, device: torch.device) -> nn.Module:
    """Model parallelism within a rank: consecutive stages on this rank's devices (all of them CPU here)."""
    if cfg.pipeline_stages == 1:
        return model
    if device.type == "cuda" and torch.cuda.device_count() >= cfg.pipeline_stages:
        devices = [torch.device("cuda", i) for i in range(cfg.pipeline_stages)]
    else:
        devices = [device] * cfg.pipeline_stages
    return PipelineModel.from_model(model, devices, micro_batches=cfg.micro_batches,
                                    boundaries=cfg.pipeline_boundaries or None)


def _monitored_value(record: dict[str, Any], cfg: TrainConfig) -> float | None:
    name = cfg.early_stopping.monitor
    needed = cfg.early_stopping.patience > 0 or cfg.scheduler == "plateau"
    if name not in record:
        if needed:
            raise ConfigError(f"train.early_stopping.monitor: {name!r} is not a metric of this run; "
                              f"choose one of {', '.join(k for k in record if k != 'epoch')}")
        return None
    return float(record[name])


def _resume(job: TrainJob, base: nn.Module, optimizer, schedule, stopper, scaler, rank: int) -> _State:
    """Rank 0 reads the newest checkpoint; the others get its scalar state here and weights by broadcast."""
    checkpoint = None
    if rank == 0 and job.train.resume == "auto":
        checkpoint = load_latest_checkpoint(Path(job.output) / "checkpoints", job.fingerprint)
        if checkpoint is not None:
            base.load_state_dict(checkpoint["model"])
            optimizer.load_state_dict(checkpoint["optimizer"])
    shared = distributed.broadcast_object(None if checkpoint is None else {
        key: checkpoint[key] for key in ("epoch", "global_step", "history", "schedule", "stopper", "scaler", "rng")
    }, "resume_state")
    if shared is None:
        return _State()
    schedule.load_state_dict(shared["schedule"])
    stopper.load_state_dict(shared["stopper"])
    if scaler is not None and shared["scaler"]:
        scaler.load_state_dict(shared["scaler"])
    if rank < len(shared["rng"]):
        restore_rng_state(shared["rng"][rank])
    print(f"resumed from checkpoint epoch {shared['epoch']} ({job.output}/checkpoints)")
    return _State(epoch=shared["epoch"], global_step=shared["global_step"], history=list(shared["history"]))


def _checkpoint(job: TrainJob, base: nn.Module, optimizer, schedule, stopper, scaler, state: _State, rank: int) -> None:
    rng = distributed.allgather_object(capture_rng_state(), "rng_state")  # a collective: every rank takes part
    if rank != 0:
        return
    write_checkpoint_atomically(Path(job.output) / "checkpoints", state.epoch, {
        "fingerprint": job.fingerprint, "epoch": state.epoch, "global_step": state.global_step,
        "history": state.history, "model": base.state_dict(), "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(), "stopper": stopper.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else {}, "rng": rng,
    }, keep=job.train.keep_checkpoints)


def _report(record: dict[str, Any]) -> None:
    context = current_rank()
    if context is not None:
        context.report(record)


def _write_metrics(path: Path, history: list[dict[str, Any]]) -> None:
    """The whole history, rewritten atomically: after a resume it holds each epoch exactly once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text("".join(json.dumps({k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                                        for k, v in record.items()}) + "\n" for record in history))
    os.replace(temp, path)
