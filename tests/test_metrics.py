"""Metric sums: exact sample-weighted averages after adding the sums of several ranks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sparkml_par.errors import SparkmlParError
from sparkml_par.train.metrics import classification_sums, finalize, regression_sums, zero_sums


def test_classification_sums_of_one_batch():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 0.0, 0.0]])
    targets = torch.tensor([0, 2, 2, 1])
    sums = classification_sums(logits, targets)
    assert sums.dtype == torch.float64
    expected_loss = F.cross_entropy(logits.double(), targets, reduction="sum").item()
    assert sums.tolist() == pytest.approx([expected_loss, 2.0, 4.0])
    metrics = finalize(sums)
    assert metrics == pytest.approx({"loss": expected_loss / 4, "accuracy": 0.5, "samples": 4})


def test_regression_sums_of_one_batch():
    predictions = torch.tensor([[1.0], [2.0], [4.0]])
    targets = torch.tensor([1.5, 2.0, 2.0])  # (N,) against (N, 1): reshaped, not broadcast
    sums = regression_sums(predictions, targets)
    assert sums.tolist() == pytest.approx([4.25, 4.25, 2.5, 3.0])
    assert finalize(sums) == pytest.approx({"loss": 4.25 / 3, "mse": 4.25 / 3, "mae": 2.5 / 3, "samples": 3})


def test_regression_with_several_outputs_averages_over_outputs_per_sample():
    sums = regression_sums(torch.tensor([[1.0, 3.0], [0.0, 0.0]]), torch.tensor([[0.0, 0.0], [0.0, 2.0]]))
    # Sample errors: (1, 3) -> mse 5, mae 2; (0, -2) -> mse 2, mae 1.
    assert sums.tolist() == pytest.approx([7.0, 7.0, 3.0, 2.0])
    assert finalize(sums)["mse"] == pytest.approx(
        F.mse_loss(torch.tensor([[1.0, 3.0], [0.0, 0.0]]), torch.tensor([[0.0, 0.0], [0.0, 2.0]])).item()
    )


def test_summed_shards_of_different_sizes_equal_the_whole_dataset():
    torch.manual_seed(0)
    logits, targets = torch.randn(50, 4), torch.randint(0, 4, (50,))
    # Three "ranks" with uneven shards and batches; the all-reduce is a sum of their totals.
    shards = [(0, 7), (7, 30), (30, 50)]
    totals = []
    for start, end in shards:
        total = zero_sums("classification")
        for batch in range(start, end, 8):
            stop = min(batch + 8, end)
            total += classification_sums(logits[batch:stop], targets[batch:stop])
        totals.append(total)
    reduced = finalize(torch.stack(totals).sum(dim=0))
    assert reduced["loss"] == pytest.approx(F.cross_entropy(logits.double(), targets).item(), rel=1e-12)
    assert reduced["accuracy"] == pytest.approx((logits.argmax(1) == targets).double().mean().item(), rel=1e-12)
    assert reduced["samples"] == 50
    # Averaging the three ranks' means instead would weight the 7-sample shard like the 23-sample one.
    mean_of_means = sum(finalize(t)["loss"] for t in totals) / 3
    assert abs(mean_of_means - reduced["loss"]) > 1e-3


def test_zero_sums_shapes_and_empty_split():
    assert zero_sums("classification").tolist() == [0.0, 0.0, 0.0]
    assert zero_sums("regression").tolist() == [0.0, 0.0, 0.0, 0.0]
    with pytest.raises(SparkmlParError, match="metrics over 0 samples"):
        finalize(zero_sums("regression"))


def test_sums_do_not_keep_the_autograd_graph():
    logits = torch.randn(4, 3, requires_grad=True)
    assert not classification_sums(logits, torch.tensor([0, 1, 2, 0])).requires_grad
    assert not regression_sums(logits[:, :1], torch.zeros(4)).requires_grad
