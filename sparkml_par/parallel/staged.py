"""GPipe-style pipeline (model) parallelism within one rank.

A model that is an `nn.Sequential` (or offers `.as_sequential()`) is cut into consecutive stages,
each placed on its own device. `StagedModel.forward` splits a batch into micro-batches and runs them
through the stages on a fill/drain schedule: at clock tick t stage s works on micro-batch t - s, so
on GPUs (whose kernels launch asynchronously) every stage is busy once the pipeline has filled.
Autograd records the same graph, so the backward pass runs the schedule in reverse with no extra code
and the gradients equal those of the unsplit model.

Hybrid parallelism (data parallel across Horovod ranks x pipeline stages within each rank) needs
nothing here: each rank builds its own `StagedModel` over its local devices, and the training loop
wraps `staged.named_parameters()` in Horovod's `DistributedOptimizer` as it would for any model.
Horovod then all-reduces each parameter's gradient across ranks, whichever device the stage holding
it lives on. The stages share their layers with the original model, so checkpoints and artifacts
save the original model's `state_dict`, whose keys do not depend on the split.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn

from sparkml_par.errors import ConfigError


def to_sequential(model: nn.Module) -> nn.Sequential:
    """The model as consecutive layers: itself if it is an nn.Sequential, else `model.as_sequential()`."""
    if isinstance(model, nn.Sequential):
        return model
    if hasattr(model, "as_sequential"):
        return model.as_sequential()
    raise ConfigError(
        f"train.pipeline_stages > 1 needs a model made of consecutive layers, but "
        f"{type(model).__name__} is not an nn.Sequential and has no as_sequential() method; "
        f"set train.pipeline_stages=1 or give the model an as_sequential() method"
    )


def split_into_stages(seq: nn.Sequential, num_stages: int, boundaries: list[int] | None = None) -> list[nn.Sequential]:
    """Cuts `seq` into `num_stages` consecutive stages sharing its layers.

    `boundaries` are the layer indices where stages 2..num_stages begin; without them the cut
    balances parameters per stage (the usual proxy for memory and compute).
    """
    layers = list(seq.children())
    if num_stages < 1:
        raise ConfigError(f"train.pipeline_stages: {num_stages!r} must be at least 1")
    if num_stages > len(layers):
        raise ConfigError(
            f"train.pipeline_stages={num_stages} but the model has only {len(layers)} layers; "
            f"use at most {len(layers)} stages"
        )
    if boundaries is None:
        weights = [sum(p.numel() for p in layer.parameters()) for layer in layers]
        boundaries = _balanced_boundaries(weights, num_stages)
    else:
        _check_boundaries(list(boundaries), num_stages, len(layers))
    starts = [0, *boundaries]
    ends = [*boundaries, len(layers)]
    return [nn.Sequential(*layers[start:end]) for start, end in zip(starts, ends)]


def _check_boundaries(boundaries: list[int], num_stages: int, num_layers: int) -> None:
    if len(boundaries) != num_stages - 1:
        raise ConfigError(
            f"pipeline boundaries {boundaries!r}: {num_stages} stages need {num_stages - 1} "
            f"boundaries (the layer index where each stage after the first begins)"
        )
    if any(not 0 < b < num_layers for b in boundaries) or boundaries != sorted(set(boundaries)):
        raise ConfigError(
            f"pipeline boundaries {boundaries!r} must be strictly increasing layer indices "
            f"between 1 and {num_layers - 1} (the model has {num_layers} layers)"
        )


def _balanced_boundaries(weights: list[int], num_stages: int) -> list[int]:
    """Cut points minimising the largest stage weight, each stage holding at least one layer.

    Each layer counts one more than its parameters, so parameter-free layers (activations, pooling)
    spread over the stages instead of all collecting in one.
    """
    n = len(weights)
    prefix = [0]
    for w in weights:
        prefix.append(prefix[-1] + w + 1)
    inf = float("inf")
    # best[s][j]: smallest possible largest stage over the first j layers cut into s stages.
    best = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(num_stages + 1)]
    best[0][0] = 0
    for s in range(1, num_stages + 1):
        for j in range(s, n + 1):
            for i in range(s - 1, j):
                cost = max(best[s - 1][i], prefix[j] - prefix[i])
                if cost < best[s][j]:
                    best[s][j], cut[s][j] = cost, i
    boundaries, j = [], n
    for s in range(num_stages, 1, -1):
        j = cut[s][j]
        boundaries.append(j)
    return boundaries[::-1]


class StagedModel(nn.Module):
    """Stages on devices, run GPipe-style over `micro_batches` chunks of each batch.

    The output is the concatenation of the micro-batch outputs on the last stage's device, so a
    loss over it (and its gradients) matches the unsplit model's. BatchNorm in training mode is the
    exception: it normalises each micro-batch with that micro-batch's own statistics.
    """

    def __init__(self, stages: Sequence[nn.Module], devices: Sequence[torch.device | str], micro_batches: int = 1):
        super().__init__()
        if len(devices) != len(stages):
            raise ConfigError(
                f"pipeline has {len(stages)} stages but {len(devices)} devices "
                f"({[str(d) for d in devices]}); give one device per stage"
            )
        if micro_batches < 1:
            raise ConfigError(f"train.micro_batches: {micro_batches!r} must be at least 1")
        self.devices = [torch.device(d) for d in devices]
        self.stages = nn.ModuleList(stage.to(device) for stage, device in zip(stages, self.devices))
        self.micro_batches = micro_batches

    @classmethod
    def from_model(
        cls,
        model: nn.Module,
        devices: Sequence[torch.device | str],
        micro_batches: int = 1,
        boundaries: list[int] | None = None,
    ) -> "StagedModel":
        """Splits `model` into one stage per device (see `split_into_stages`)."""
        return cls(split_into_stages(to_sequential(model), len(devices), boundaries), devices, micro_batches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # torch.chunk gives fewer chunks when the batch is smaller than micro_batches; that is fine.
        activations = list(x.chunk(self.micro_batches))
        num_stages = len(self.stages)
        for tick in range(len(activations) + num_stages - 1):
            # Every micro-batch is touched by at most one stage per tick, so the order within a tick
            # does not matter for the result; on GPUs the stages' kernels of one tick overlap.
            for s in range(max(0, tick - len(activations) + 1), min(tick, num_stages - 1) + 1):
                i = tick - s
                activations[i] = self.stages[s](activations[i].to(self.devices[s]))
        return torch.cat(activations)
