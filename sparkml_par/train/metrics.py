"""Per-batch metric sums that ranks add up exactly.

Each function returns float64 SUMS (never means), on the inputs' device. The loop adds them over its
batches, all-reduces the totals with a sum across ranks, and calls `finalize` once: the result is
the mean over every sample of every rank, weighted correctly even when shards differ in size.
The losses are the ones the loop minimises: cross-entropy for classification, mean squared error
(over outputs, per sample) for regression.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from sparkml_par.errors import SparkmlParError

CLASSIFICATION_SUMS = ("loss_sum", "correct", "count")
REGRESSION_SUMS = ("loss_sum", "squared_error_sum", "abs_error_sum", "count")


def classification_sums(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[cross-entropy sum, correct predictions, samples] of one batch of logits (N, classes)."""
    logits = logits.detach().double()
    targets = targets.detach().long().reshape(-1)
    loss_sum = F.cross_entropy(logits, targets, reduction="sum")
    correct = (logits.argmax(dim=1) == targets).sum().double()
    return torch.stack(
        [loss_sum, correct, torch.tensor(float(len(targets)), dtype=torch.float64, device=logits.device)]
    )


def regression_sums(predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[loss sum, squared error sum, absolute error sum, samples]; errors are averaged over outputs per sample."""
    predictions = predictions.detach().double()
    # Reshape, never broadcast: (N, 1) predictions against (N,) targets would silently give N x N errors.
    errors = (predictions - targets.detach().double().reshape(predictions.shape)).reshape(len(predictions), -1)
    squared = errors.square().mean(dim=1).sum()
    absolute = errors.abs().mean(dim=1).sum()
    count = torch.tensor(float(len(predictions)), dtype=torch.float64, device=predictions.device)
    # The loss is the mean squared error, so loss and mse agree; both are kept so every task has a loss.
    return torch.stack([squared, squared, absolute, count])


def zero_sums(task: Literal["classification", "regression"], device: torch.device | str = "cpu") -> torch.Tensor:
    """The starting total: a rank with no batch still takes part in the all-reduce with zeros."""
    fields = CLASSIFICATION_SUMS if task == "classification" else REGRESSION_SUMS
    return torch.zeros(len(fields), dtype=torch.float64, device=device)


def finalize(sums: torch.Tensor) -> dict[str, float]:
    """Means from (all-reduced) sums: loss and accuracy, or loss, mse and mae; plus the sample count."""
    values = sums.detach().cpu().tolist()
    count = values[-1]
    if count <= 0:
        raise SparkmlParError(
            "metrics over 0 samples: the evaluated split is empty on every rank; check the "
            "dataset's split sizes (data.split) or skip this evaluation"
        )
    if len(values) == len(CLASSIFICATION_SUMS):
        loss_sum, correct, _ = values
        return {"loss": loss_sum / count, "accuracy": correct / count, "samples": int(count)}
    if len(values) == len(REGRESSION_SUMS):
        loss_sum, squared, absolute, _ = values
        return {"loss": loss_sum / count, "mse": squared / count, "mae": absolute / count, "samples": int(count)}
    raise ValueError(
        f"expected {len(CLASSIFICATION_SUMS)} classification or {len(REGRESSION_SUMS)} regression "
        f"sums, got {len(values)}"
    )


# Fields of every epoch record besides its metrics (see train.loop.Trainer._epoch).
EPOCH_FIELDS = ("lr", "epoch_time", "samples_per_sec", "step")


def epoch_record_metrics(task: str, validation: bool) -> list[str]:
    """The names an epoch record holds, and so what train.early_stopping.monitor can watch: train_* always,
    val_* when the ranks validate (a validation split of at least one row per rank)."""
    means = ["loss", "accuracy"] if task == "classification" else ["loss", "mse", "mae"]
    prefixes = ["train_", "val_"] if validation else ["train_"]
    return [prefix + mean for prefix in prefixes for mean in means] + list(EPOCH_FIELDS)
