"""Faults the reliability tests inject on purpose, through the seams a user has too.

A model that kills its rank (`train.model=injected_faults:killing_mlp`, loaded by import path as a
user's own model is) and a Launcher setup hook that stalls a rank before the rendezvous: the product
carries no switch for injected faults. Spark's Python workers import this module by name: the test
directory is on their path (conftest.py, and the simulated cluster's executors).
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path

import torch

from sparkml_par.models.mlp import MLP
from sparkml_par.train.loop import steps_per_epoch

# The trainer settings of the kill-and-resume tests (add train.epochs): shuffling, dropout, plain SGD and a
# step schedule, so every piece of state must survive the restart; batches of 32 on 2 ranks.
RESUMABLE = [
    "train.model=injected_faults:killing_mlp",
    "train.optimizer=sgd",
    "train.lr=0.05",
    "train.scheduler=step",
    "train.gamma=0.5",
    "train.batch_size=32",
    "train.num_proc=2",
]


def killing_model_args(
    dataset: Path,
    kill_rank: int = -1,
    epoch: int = 2,
    step: int = 3,
    marker: str = "",
    signal_name: str = "SIGKILL",
    step_seconds: float = 0.0,
) -> str:
    """The train.model_args of killing_mlp (hidden [32], dropout 0.2) under RESUMABLE that send `signal_name`
    to `kill_rank` at that 1-based step of that epoch of training on the dataset at `dataset`; kill_rank=-1
    never kills. Each training step takes at least `step_seconds`."""
    at = (epoch - 1) * steps_per_epoch(train_rows(dataset), 32, 1) + step
    return (
        f"train.model_args={{hidden: [32], dropout: 0.2, kill_rank: {kill_rank}, kill_at_step: {at}, "
        f"marker: '{marker}', signal_name: {signal_name}, step_seconds: {step_seconds}}}"
    )


def train_rows(dataset: Path) -> int:
    return json.loads((dataset / "_manifest.json").read_text())["splits"]["train"]["rows"]


class KillingMLP(MLP):
    """`train.model=mlp`'s network, whose rank `kill_rank` sends its own process `signal_name` (SIGKILL by
    default) at training step `kill_at_step` (1-based, counted from the start of training); with `marker`,
    only while that file does not exist (it is created first), i.e. once. With `step_seconds`, each training
    forward pass sleeps that long: steps as slow as a large model's, which the ranks' SIGTERM agreement sees.

    The count is a buffer, so it is checkpointed and restored with the weights: a run resumed from the
    checkpoint of epoch e counts on from e's last step, and the kill lands on the same step every attempt.
    """

    def __init__(
        self,
        in_features: int,
        num_outputs: int,
        hidden: list[int],
        dropout: float,
        kill_rank: int,
        kill_at_step: int,
        marker: str,
        signal_name: str = "SIGKILL",
        step_seconds: float = 0.0,
    ):
        super().__init__(in_features, num_outputs, hidden, dropout, batchnorm=False)
        self.kill_rank, self.kill_at_step, self.marker = kill_rank, kill_at_step, marker
        self.step_seconds = step_seconds
        self.signal = getattr(signal, signal_name)
        self.register_buffer("train_steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            time.sleep(self.step_seconds)
            self.train_steps += 1
            if int(self.train_steps) == self.kill_at_step and _rank() == self.kill_rank and self._armed():
                os.kill(os.getpid(), self.signal)
        return super().forward(x)

    def _armed(self) -> bool:
        if not self.marker:
            return True
        if Path(self.marker).exists():
            return False
        Path(self.marker).touch()
        return True


def killing_mlp(
    *,
    input_shape,
    num_outputs,
    hidden=(32,),
    dropout=0.0,
    kill_rank=-1,
    kill_at_step=0,
    marker="",
    signal_name="SIGKILL",
    step_seconds=0.0,
):
    """Builder for `train.model=injected_faults:killing_mlp`; kill_rank=-1 never kills (the uninterrupted run)."""
    return KillingMLP(
        math.prod(input_shape),
        num_outputs,
        [int(size) for size in hidden],
        float(dropout),
        int(kill_rank),
        int(kill_at_step),
        str(marker),
        str(signal_name),
        float(step_seconds),
    )


def _rank() -> int:
    import horovod.torch as hvd

    return hvd.rank()


def stall_rank_one_before_the_rendezvous(slot) -> None:
    """A Launcher setup hook: rank 1 never gets to the Horovod rendezvous (until its stage is cancelled)."""
    if slot.rank == 1:
        time.sleep(600)
