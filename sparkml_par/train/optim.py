"""Optimizer, learning-rate scaling with the rank count, warm-up and per-epoch schedules.

With N ranks each optimizer step averages gradients over an N times larger global batch, so the
learning rate is scaled up (`scaled_lr`) and reached gradually (warm-up) to avoid early divergence
(Goyal et al., "Accurate, Large Minibatch SGD"). All schedules are torch's own; they are applied
multiplicatively to the optimizer's learning rate, so warm-up and a per-epoch decay compose.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import torch
from torch.optim import lr_scheduler

from sparkml_par.config import TrainConfig
from sparkml_par.errors import ConfigError, SparkmlParError


def build_optimizer(params_or_named: Iterable[Any], cfg: TrainConfig, lr: float) -> torch.optim.Optimizer:
    """The optimizer `cfg.optimizer` over parameters or (name, parameter) pairs, at learning rate `lr`."""
    params = [p[1] if isinstance(p, tuple) else p for p in params_or_named]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=lr, momentum=cfg.momentum, nesterov=cfg.nesterov, weight_decay=cfg.weight_decay
        )
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=cfg.weight_decay, fused=_fused(params))
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=cfg.weight_decay, fused=_fused(params))
    raise ConfigError(f"train.optimizer: {cfg.optimizer!r} is not one of 'sgd', 'adam', 'adamw'")


def _fused(params: list[torch.Tensor]) -> bool | None:
    """torch's fused Adam kernel for parameters on the CPU, torch's own choice elsewhere.

    On the CPU torch's default is its per-parameter loop (a dozen tensor ops for each parameter), a large
    part of a small model's step; the fused kernel updates every parameter in one pass. On a GPU torch
    already takes its multi-tensor path.
    """
    on_cpu = params and all(p.device.type == "cpu" for p in params)
    return True if on_cpu and _FUSED_ON_CPU else None


# torch 2.3 (Databricks 15.4) has the fused kernel for GPUs only and refuses fused=True on the CPU.
_FUSED_ON_CPU = torch.torch_version.TorchVersion(torch.__version__) >= (2, 4)


def scaled_lr(cfg: TrainConfig, world_size: int) -> float:
    """`cfg.lr` grown with the rank count: linear (lr * size), sqrt (lr * sqrt(size)) or none."""
    if world_size < 1:
        raise ValueError(f"world_size={world_size!r} must be at least 1")
    if cfg.lr_scaling == "linear":
        return cfg.lr * world_size
    if cfg.lr_scaling == "sqrt":
        return cfg.lr * math.sqrt(world_size)
    return cfg.lr


class LearningRateSchedule:
    """Warm-up stepped per optimizer step, then `cfg.scheduler` stepped per epoch.

    Warm-up rises linearly from `cfg.lr` (one rank's learning rate) to the optimizer's scaled learning
    rate over `warmup_epochs * steps_per_epoch` steps; with one rank or lr_scaling=none there is
    nothing to warm up to. Build it on a fresh optimizer, before loading any saved state.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: TrainConfig, steps_per_epoch: int):
        if steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch={steps_per_epoch!r} must be at least 1")
        self.optimizer = optimizer
        self.warmup = _build_warmup(optimizer, cfg, steps_per_epoch)
        self.epoch_schedule = _build_epoch_schedule(optimizer, cfg)

    def step_batch(self) -> None:
        """Call after every optimizer step."""
        if self.warmup is not None and self.warmup.last_epoch < self.warmup.total_iters:
            self.warmup.step()

    def step_epoch(self, metric_value: float | None = None) -> None:
        """Call after every epoch; the plateau schedule needs the monitored metric's (rank-averaged) value."""
        if isinstance(self.epoch_schedule, lr_scheduler.ReduceLROnPlateau):
            if metric_value is None:
                raise SparkmlParError(
                    "train.scheduler=plateau needs the value of train.early_stopping.monitor "
                    "after every epoch; evaluate a validation split or pick another scheduler"
                )
            self.epoch_schedule.step(metric_value)
        elif self.epoch_schedule is not None:
            self.epoch_schedule.step()

    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def state_dict(self) -> dict[str, Any]:
        return {
            "warmup": None if self.warmup is None else self.warmup.state_dict(),
            "epoch": None if self.epoch_schedule is None else self.epoch_schedule.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, schedule in (("warmup", self.warmup), ("epoch", self.epoch_schedule)):
            if (schedule is None) != (state[name] is None):
                raise SparkmlParError(
                    f"saved learning-rate schedule has {'no' if state[name] is None else 'a'} "
                    f"{name} part but this run's config has {'none' if schedule is None else 'one'}; "
                    f"resume with the scheduler and warm-up settings the run started with"
                )
            if schedule is not None:
                schedule.load_state_dict(state[name])


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig, steps_per_epoch: int) -> LearningRateSchedule:
    """The learning-rate schedule of `cfg` over `optimizer` (whose lr is the scaled one)."""
    return LearningRateSchedule(optimizer, cfg, steps_per_epoch)


def _build_warmup(optimizer: torch.optim.Optimizer, cfg: TrainConfig, steps_per_epoch: int):
    steps = round(cfg.warmup_epochs * steps_per_epoch)
    group = optimizer.param_groups[0]
    target = group.get("initial_lr", group["lr"])  # set by schedulers, survives a loaded optimizer state
    if steps == 0 or target <= 0 or cfg.lr >= target:
        return None
    return lr_scheduler.LinearLR(optimizer, start_factor=cfg.lr / target, end_factor=1.0, total_iters=steps)


def _build_epoch_schedule(optimizer: torch.optim.Optimizer, cfg: TrainConfig):
    if cfg.scheduler == "step":
        return lr_scheduler.StepLR(optimizer, step_size=cfg.step_size, gamma=cfg.gamma)
    if cfg.scheduler == "exponential":
        return lr_scheduler.ExponentialLR(optimizer, gamma=cfg.gamma)
    if cfg.scheduler == "cosine":
        return lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.epochs)
    if cfg.scheduler == "plateau":
        # An improvement means the same as for early stopping: better by at least min_delta.
        return lr_scheduler.ReduceLROnPlateau(
            optimizer,
            mode=cfg.early_stopping.mode,
            factor=cfg.gamma,
            patience=cfg.plateau_patience,
            threshold=cfg.early_stopping.min_delta,
            threshold_mode="abs",
        )
    return None
