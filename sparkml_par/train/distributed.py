"""The training loop's only contact with Horovod: ring all-reduce of gradients, metrics and state.

Everything here runs inside a rank started by `sparkml_par.launch`, where Horovod is initialized.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from sparkml_par.errors import ConfigError


def _hvd():
    import horovod.torch as hvd

    return hvd


def rank() -> int:
    return _hvd().rank()


def size() -> int:
    return _hvd().size()


def distributed_optimizer(
    optimizer: torch.optim.Optimizer, model: nn.Module, fp16_compression: bool, backward_passes_per_step: int
) -> torch.optim.Optimizer:
    """Gradients averaged over ranks by ring all-reduce; with k backward passes per step, accumulated
    locally k times before one all-reduce (gradient accumulation without extra communication).

    All gradients go out as one group, negotiated once a step instead of once per tensor: the per-tensor
    negotiation is the cost Horovod adds to a small model's step. With the build's idle-wait patch
    (scripts/build_horovod.sh) the group's request starts a cycle at once instead of waiting for the next.
    """
    hvd = _hvd()
    return hvd.DistributedOptimizer(
        optimizer,
        named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if fp16_compression else hvd.Compression.none,
        backward_passes_per_step=backward_passes_per_step,
        op=hvd.Average,
        groups=1,
    )


def broadcast_training_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every rank starts from rank 0's weights and optimizer state (fresh or resumed)."""
    hvd = _hvd()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)


def broadcast_object(value: Any, name: str) -> Any:
    """Rank 0's value on every rank. The name is required: Horovod's default is the value's type name,
    which differs between ranks that pass None and rank 0's real value, and then no rank ever returns."""
    return _hvd().broadcast_object(value, root_rank=0, name=name)


def allgather_object(value: Any, name: str) -> list[Any]:
    return _hvd().allgather_object(value, name=name)


def allreduce_sum(values: torch.Tensor, name: str) -> torch.Tensor:
    """Sums over ranks, so averages can be weighted by each rank's sample count exactly."""
    hvd = _hvd()
    return hvd.allreduce(values, op=hvd.Sum, name=name)


def start_allreduce_sum(values: torch.Tensor, name: str) -> Callable[[], torch.Tensor]:
    """Starts a sum over ranks in Horovod's background thread; the returned function waits for it. Every
    rank must start the same sums in the same order."""
    hvd = _hvd()
    handle = hvd.allreduce_async(values, op=hvd.Sum, name=name)
    return lambda: hvd.synchronize(handle)


def convert_sync_batchnorm(model: nn.Module) -> nn.Module:
    """BatchNorm layers whose statistics are computed over the global batch (Horovod's, CUDA only)."""
    hvd = _hvd()
    for name, child in model.named_children():
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            if not child.weight.is_cuda:
                raise ConfigError(
                    "train.sync_batchnorm=true needs GPU ranks: Horovod's SyncBatchNorm runs on CUDA "
                    "only; set spark.use_gpu=true or turn sync_batchnorm off"
                )
            sync = hvd.SyncBatchNorm(
                child.num_features, child.eps, child.momentum, child.affine, child.track_running_stats
            ).to(child.weight.device)
            sync.load_state_dict(child.state_dict())
            setattr(model, name, sync)
        else:
            convert_sync_batchnorm(child)
    return model
