"""What each Horovod rank runs: read its shard, train with ring all-reduce, validate, checkpoint.

`train_rank(job)` is handed to the launcher; Horovod is already initialized when it starts. It runs
`Trainer(job).fit()`: fit() -> _epoch() -> _train_epoch() -> _forward_backward(). The trainer's state
(model, optimizer, schedule, early stopping, scaler, RNG of every rank, history, the position inside the
epoch) is saved as one checkpoint by rank 0 at the end of epochs and every `checkpoint_every_steps` steps,
and restored and broadcast on resume, so a resumed run ends with the same weights as an uninterrupted one.

The train split is read as `job.shards` streams (train.num_proc of them), each rank reading every size-th
stream: on fewer ranks (train/job.py relaunches on the ranks a smaller cluster holds) every global batch
holds the same rows as on all of them, and every row of an epoch is trained on once.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sparkml_par.config import TrainConfig
from sparkml_par.contract import MODEL_DIR, TRAIN_METRICS
from sparkml_par.errors import ConfigError
from sparkml_par.io.store import Store
from sparkml_par.launch import current_rank
from sparkml_par.models.registry import build_from_spec
from sparkml_par.parallel.staged import StagedModel
from sparkml_par.train import distributed
from sparkml_par.train.artifact import write_model_artifact
from sparkml_par.train.checkpoint import (
    capture_rng_state,
    load_latest_checkpoint,
    restore_rng_state,
    write_checkpoint_atomically,
)
from sparkml_par.train.data import ShardBatches
from sparkml_par.train.early_stopping import EarlyStopping
from sparkml_par.train.metrics import classification_sums, finalize, regression_sums, zero_sums
from sparkml_par.train.optim import build_optimizer, build_scheduler, scaled_lr
from sparkml_par.train.preemption import Preemption


@dataclass(frozen=True)
class TrainJob:
    """Plain values every rank needs (the barrier closure captures it: no sessions, no open handles)."""

    train: TrainConfig
    splits: dict[str, str]  # split name -> dataset URL
    label: str  # the dataset's label column
    split_rows: dict[str, int]
    task: str
    model_spec: dict[str, Any]
    fingerprint: dict[str, Any]
    output: str  # URL of train.output (sparkml_par.io.store): checkpoints, metrics.jsonl, the artifact
    description: dict[str, Any]  # dataset facts stored in the artifact for scoring
    config_yaml: str
    use_gpu: bool = False
    shards: int = 1  # streams of the train split: train.num_proc, however many ranks run now
    # What stopped the launch before this one (train/job.py): reason, ranks, step and time.time() of the stop.
    resumed_after: dict[str, Any] | None = None


@dataclass
class _State:
    epoch: int = 0  # whole epochs trained
    global_step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    position: int = 0  # batches of the next epoch already trained (resumed from a step checkpoint)
    epoch_sums: torch.Tensor | None = None  # their metric sums over all ranks
    interruptions: list[dict[str, Any]] = field(default_factory=list)  # resizes and preemptions, in order


def steps_per_epoch(train_rows: int, batch_size: int, accumulation_steps: int) -> int:
    """Batches per epoch, the same on every rank: whole global batches, a multiple of the accumulation."""
    batches = max(1, train_rows // batch_size)
    return max(accumulation_steps, batches - batches % accumulation_steps)


def train_rank(job: TrainJob) -> dict[str, Any]:
    """What the launcher runs on every rank: build the trainer, resume, train, test, write the artifact."""
    return Trainer(job).fit()


class Trainer:
    """One rank's training: everything the loop needs, built once, as typed attributes.

    Built in a fixed order (seed, model, optimizer, schedule, resume, broadcast, loaders) so that every
    rank draws the same random numbers as it would in an uninterrupted run.
    """

    def __init__(self, job: TrainJob):
        cfg = self.cfg = job.train
        self.job = job
        torch.set_num_threads(cfg.threads_per_rank)
        self.rank, self.size = distributed.rank(), distributed.size()
        self.device = torch.device("cuda") if job.use_gpu and torch.cuda.is_available() else torch.device("cpu")
        _check_precision(cfg, self.device)

        torch.manual_seed(cfg.seed)  # the same initial weights everywhere (rank 0's are broadcast anyway)
        base = build_from_spec(job.model_spec).to(self.device)
        # The unsplit model: checkpoints and the artifact save its state_dict, whatever the split.
        self.base = distributed.convert_sync_batchnorm(base) if cfg.sync_batchnorm else base
        self.model = _maybe_pipeline(self.base, cfg, self.device)
        torch.manual_seed(cfg.seed * 1000 + self.rank)  # dropout differs per rank, reproducibly

        self.shards = job.shards
        self.held = list(range(self.rank, self.shards, self.size))  # the train streams this rank reads
        stream_batch = max(1, cfg.batch_size // self.shards)
        self.steps = steps_per_epoch(job.split_rows["train"], stream_batch * self.shards, cfg.accumulation_steps)
        # Horovod averages the ranks' gradients: a rank holding k streams weighs its mean loss by k*size/shards.
        self.loss_weight = len(self.held) * self.size / self.shards
        self.optimizer = distributed.distributed_optimizer(
            build_optimizer(self.model.named_parameters(), cfg, scaled_lr(cfg, self.shards)),
            self.model,
            cfg.fp16_compression,
            cfg.accumulation_steps,
        )
        self.schedule = build_scheduler(self.optimizer, cfg, self.steps // cfg.accumulation_steps)
        self.stopper = EarlyStopping.from_config(cfg.early_stopping)
        self.scaler = torch.amp.GradScaler("cuda") if cfg.precision == "fp16" else None
        self.output = Store(job.output)
        self.resumed: dict[str, Any] | None = None  # the checkpoint resumed from: url, step
        self.state = self._resume()
        distributed.broadcast_training_state(self.base, self.optimizer)

        label_dtype = torch.int64 if job.task == "classification" else torch.float32
        self.train_streams = [
            ShardBatches(
                job.splits["train"],
                stream,
                self.shards,
                stream_batch,
                label=job.label,
                shuffle=cfg.shuffle,
                seed=cfg.seed,
                shuffle_buffer=cfg.shuffle_buffer,
                cache=cfg.cache,
                label_dtype=label_dtype,
            )
            for stream in self.held
        ]
        self.evaluators = {
            name: ShardBatches(
                job.splits[name],
                self.rank,
                self.size,
                stream_batch,
                label=job.label,
                shuffle=False,
                seed=cfg.seed,
                cache=cfg.cache,
                label_dtype=label_dtype,
            )
            for name in ("validation", "test")
            if job.split_rows.get(name, 0) >= self.size
        }
        self.max_steps_reached = False
        # Set when the ranks agreed to stop at a checkpoint: reason ("preempted", "grow"), time, ranks wanted.
        self.stopping: dict[str, Any] | None = None

    def fit(self) -> dict[str, Any]:
        """Trains the remaining epochs, then tests; rank 0's result also holds the metrics and the artifact.
        Stopped at a checkpoint (SIGTERM, or slots back for more ranks), it returns {"stopped": ...} instead."""
        try:
            with Preemption() as self.preemption:
                return self._fit()
        except Exception:
            # Where the ranks that noticed a lost peer were: the driver counts the steps a resume repeats.
            _report({"failed_at_step": self.state.global_step})
            raise

    def _fit(self) -> dict[str, Any]:
        cfg, state = self.cfg, self.state
        for epoch in range(state.epoch, cfg.epochs):
            record = self._epoch(epoch)
            if record is None:
                return self._stopped()
            monitored = _monitored_value(record, cfg)
            self.schedule.step_epoch(monitored)
            stop = self.stopper.update(monitored) if monitored is not None else False
            # One decision for all ranks, even if floating point ever differed between them.
            stop = distributed.broadcast_object(stop, "early_stop")
            state.history.append(record)
            state.epoch = epoch + 1
            _report(record)
            last = stop or self.max_steps_reached or state.epoch == cfg.epochs
            if state.epoch % cfg.checkpoint_every == 0 or last or self.stopping is not None:
                self._checkpoint()
                if not last and self.stopping is None:
                    self.stopping = self._grow()
            if self.rank == 0:
                _write_metrics(self.output, state.history)
            if self.stopping is not None and not last:
                return self._stopped()
            if stop or self.max_steps_reached:
                break

        test_metrics = self._evaluate(self.evaluators["test"]) if "test" in self.evaluators else {}
        result = {"rank": self.rank, "epochs_run": state.epoch, "global_step": state.global_step}
        if self.rank == 0:
            metrics = {
                "history": state.history,
                "test": test_metrics,
                "stopped_early": bool(state.history) and state.epoch < cfg.epochs and not self.max_steps_reached,
                "interruptions": state.interruptions,
            }
            artifact = write_model_artifact(
                self.output.child(MODEL_DIR).url,
                self.base.state_dict(),
                self.job.description,
                metrics,
                self.job.config_yaml,
            )
            result.update(metrics, artifact=artifact)
        return result

    def _stopped(self) -> dict[str, Any]:
        return {"rank": self.rank, "stopped": {**self.stopping, "step": self.state.global_step, "ranks": self.size}}

    def _epoch(self, epoch: int) -> dict[str, Any] | None:
        """One epoch of training and validation: its record (rank-averaged metrics, lr, time, throughput,
        samples, ranks, the interruptions inside it); None when the ranks stopped inside it."""
        started = time.perf_counter()
        self.model.train()
        trained = self._train_epoch(epoch)
        if trained is None:
            return None
        train_sums, samples_here = trained
        record = {"epoch": epoch + 1, **{f"train_{k}": v for k, v in train_sums.items() if k != "samples"}}
        if "validation" in self.evaluators:
            record.update(
                {f"val_{k}": v for k, v in self._evaluate(self.evaluators["validation"]).items() if k != "samples"}
            )
        elapsed = time.perf_counter() - started
        record.update(
            {
                "lr": self.schedule.current_lr(),
                "epoch_time": elapsed,
                "samples_per_sec": samples_here / elapsed,
                "step": self.state.global_step,
                "samples": train_sums["samples"],
                "ranks": self.size,
            }
        )
        inside = [event for event in self.state.interruptions if event["epoch"] == epoch + 1]
        if inside:
            record["interruptions"] = inside
        return record

    def _train_epoch(self, epoch: int) -> tuple[dict[str, float], int] | None:
        """The epoch's train metrics and the samples this launch trained of it (a resume starts at the
        checkpoint's position); None when the ranks stopped at a step checkpoint."""
        cfg, task = self.cfg, self.job.task
        start = self.state.position if epoch == self.state.epoch else 0
        sums = zero_sums(task, self.device)
        context = current_rank()
        batches = zip(*(stream.epoch(epoch, self.steps, start) for stream in self.train_streams))
        for index, parts in enumerate(batches, start=start):
            if context is not None:
                context.heartbeat()
            x, y = _joined(parts)
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            sums += self._forward_backward(x, y)
            if (index + 1) % cfg.accumulation_steps == 0:
                self._optimizer_step()
                self.schedule.step_batch()
                self.state.global_step += 1
                self._note_resumed()
                if cfg.max_steps and self.state.global_step >= cfg.max_steps:
                    self.max_steps_reached = True
                    break
                if self._stop_at(index + 1, sums):
                    return None
        here = distributed.allreduce_sum(sums, "train_sums")
        total = here if self.state.epoch_sums is None else here + self.state.epoch_sums.to(here.device)
        self.state.position, self.state.epoch_sums = 0, None
        return finalize(total), int(here[-1].item())

    def _stop_at(self, position: int, sums: torch.Tensor) -> bool:
        """After each optimizer step: stop here when any rank was sent SIGTERM (the epoch's last step leaves
        the checkpoint to the epoch's end), write a step checkpoint when one is due, and stop after it when
        the cluster has slots for more ranks again. A collective: every rank calls it after every step."""
        signalled = self.preemption.requested()
        last = position == self.steps
        every = self.cfg.checkpoint_every_steps
        if signalled is not None and self.stopping is None:
            self.stopping = {"reason": "preempted", "at": signalled}
            if last:
                return False
        elif last or not (every and self.state.global_step % every == 0):
            return False
        self._checkpoint(position, sums)
        if self.stopping is None:
            self.stopping = self._grow()
        return self.stopping is not None

    def _grow(self) -> dict[str, Any] | None:
        """At a checkpoint of a run on fewer ranks than streams: stop to relaunch on more when the cluster
        has the slots again (rank 0 asks the driver; a collective)."""
        if self.size >= self.shards:
            return None
        context = current_rank()
        slots = context.cluster_slots() if self.rank == 0 and context is not None else None
        ranks = min(distributed.broadcast_object(slots, "cluster_slots") or 0, self.shards)
        return {"reason": "grow", "wanted": ranks, "at": time.time()} if ranks > self.size else None

    def _note_resumed(self) -> None:
        """After the first step of a launch that resumed what a resize or preemption stopped: the event, in
        the checkpointed state, the epoch's record and a progress record for the driver."""
        after, resumed = self.job.resumed_after, self.resumed
        self.resumed = None
        # A launch Spark reran resumes a checkpoint that may already hold the event.
        if after is None or resumed is None or any(e["at"] == after["at"] for e in self.state.interruptions):
            return
        event = {
            "reason": after["reason"],
            "at": after["at"],
            "epoch": self.state.epoch + 1,
            "ranks_before": after["ranks"],
            "ranks_after": self.size,
            "checkpoint": resumed["url"],
            "steps_repeated": max(0, after["step"] - resumed["step"]) if after.get("step") is not None else None,
            "seconds_to_training": round(time.time() - after["at"], 3),
        }
        self.state.interruptions.append(event)
        if self.rank == 0:
            _report({"interruption": event})

    def _forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with _autocast(self.cfg, self.device):
            out = self.model(x)
            loss = _loss(out, y, self.job.task)
        scaled = loss / self.cfg.accumulation_steps
        if self.loss_weight != 1.0:
            scaled = scaled * self.loss_weight
        (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
        return _sums(out.float(), y, self.job.task)

    def _optimizer_step(self) -> None:
        optimizer, scaler = self.optimizer, self.scaler
        if self.cfg.grad_clip > 0:
            # Clip the averaged gradient: finish the all-reduce first, then step without a second one.
            optimizer.synchronize()
            if scaler is not None:
                scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
            with optimizer.skip_synchronize():
                _step(optimizer, scaler)
        else:
            _step(optimizer, scaler)
        optimizer.zero_grad()

    @torch.no_grad()
    def _evaluate(self, data: ShardBatches) -> dict[str, float]:
        self.model.eval()
        sums = zero_sums(self.job.task, self.device)
        for x, y in data.all_rows():
            x, y = x.to(self.device), y.to(self.device)
            with _autocast(self.cfg, self.device):
                out = self.model(x)
            sums += _sums(out.float(), y, self.job.task)
        self.model.train()
        return finalize(distributed.allreduce_sum(sums, "eval_sums"))

    def _resume(self) -> _State:
        """Rank 0 reads the newest checkpoint; the others get its scalar state here and weights by broadcast."""
        job, checkpoint = self.job, None
        if self.rank == 0 and job.train.resume == "auto":
            checkpoint = load_latest_checkpoint(self.output.child("checkpoints").url, job.fingerprint)
            if checkpoint is not None:
                self.base.load_state_dict(checkpoint["model"])
                self.optimizer.load_state_dict(checkpoint["optimizer"])
        keys = ("epoch", "global_step", "history", "schedule", "stopper", "scaler", "rng", "position", "url")
        shared = distributed.broadcast_object(
            None
            if checkpoint is None
            else {
                **{key: checkpoint[key] for key in keys},
                # Absent from checkpoints of versions without step checkpoints and resizes.
                "epoch_sums": checkpoint.get("epoch_sums"),
                "interruptions": checkpoint.get("interruptions", []),
            },
            "resume_state",
        )
        if shared is None:
            return _State()
        self.schedule.load_state_dict(shared["schedule"])
        self.stopper.load_state_dict(shared["stopper"])
        if self.scaler is not None and shared["scaler"]:
            self.scaler.load_state_dict(shared["scaler"])
        if self.rank < len(shared["rng"]):
            restore_rng_state(shared["rng"][self.rank])
        epoch, position = shared["epoch"], shared["position"]
        inside = f", {position} of {self.steps} batches into epoch {epoch + 1}" if position else ""
        print(f"resumed from checkpoint epoch {epoch}{inside} ({shared['url']})")
        self.resumed = {"url": shared["url"], "step": shared["global_step"]}
        return _State(
            epoch=epoch,
            global_step=shared["global_step"],
            history=list(shared["history"]),
            position=position,
            epoch_sums=shared["epoch_sums"],
            interruptions=list(shared["interruptions"]),
        )

    def _checkpoint(self, position: int = 0, sums: torch.Tensor | None = None) -> None:
        """Rank 0 writes the state; at a step checkpoint (`position` batches into the epoch) with the
        epoch's metric sums so far. A collective: every rank takes part."""
        rng = distributed.allgather_object(capture_rng_state(), "rng_state")
        state = self.state
        epoch_sums = None
        if position:
            epoch_sums = distributed.allreduce_sum(sums, "checkpoint_sums").cpu()
            if state.epoch_sums is not None:
                epoch_sums = epoch_sums + state.epoch_sums
        if self.rank != 0:
            return
        url = write_checkpoint_atomically(
            self.output.child("checkpoints").url,
            state.epoch,
            {
                "fingerprint": self.job.fingerprint,
                "epoch": state.epoch,
                "global_step": state.global_step,
                "history": state.history,
                "model": self.base.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "schedule": self.schedule.state_dict(),
                "stopper": self.stopper.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else {},
                "rng": rng,
                "epoch_sums": epoch_sums,
                "interruptions": state.interruptions,
            },
            keep=self.cfg.keep_checkpoints,
            position=position,
        )
        if self.stopping is not None and self.stopping["reason"] == "preempted":
            print(
                f"SIGTERM: every rank stopped after step {state.global_step}; checkpoint {url} on disk "
                f"{time.time() - self.stopping['at']:.2f} s after the signal"
            )


def _joined(parts: tuple[tuple[torch.Tensor, torch.Tensor], ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of the rank's streams' batches (the same batch when it reads one stream)."""
    if len(parts) == 1:
        return parts[0]
    return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])


def _step(optimizer, scaler) -> None:
    if scaler is None:
        optimizer.step()
    else:
        scaler.step(optimizer)
        scaler.update()


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
        raise ConfigError(
            "train.precision=fp16 needs GPU ranks (its gradient scaler is CUDA-only); "
            "use train.precision=bf16 on CPUs, or set spark.use_gpu=true"
        )


def _maybe_pipeline(model: nn.Module, cfg: TrainConfig, device: torch.device) -> nn.Module:
    """Model parallelism within a rank: consecutive stages on this rank's devices (all of them CPU here)."""
    if cfg.pipeline_stages == 1:
        return model
    context = current_rank()
    own = context.gpu_devices if context is not None else tuple(range(torch.cuda.device_count()))
    if device.type == "cuda" and len(own) >= cfg.pipeline_stages:
        devices = [torch.device("cuda", i) for i in own[: cfg.pipeline_stages]]  # the GPUs Spark gave this rank
    else:
        devices = [device] * cfg.pipeline_stages
    return StagedModel.from_model(
        model, devices, micro_batches=cfg.micro_batches, boundaries=cfg.pipeline_boundaries or None
    )


def _monitored_value(record: dict[str, Any], cfg: TrainConfig) -> float | None:
    """The value early stopping and the plateau schedule watch (the driver checked that the ranks report it)."""
    value = record.get(cfg.early_stopping.monitor)
    return None if value is None else float(value)


def _report(record: dict[str, Any]) -> None:
    context = current_rank()
    if context is not None:
        context.report(record)


def _write_metrics(output: Store, history: list[dict[str, Any]]) -> None:
    """The whole history, rewritten whole: after a resume it holds each epoch exactly once."""
    output.write_text(
        TRAIN_METRICS,
        "".join(
            json.dumps({k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()})
            + "\n"
            for record in history
        ),
    )
