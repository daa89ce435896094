"""Pipeline parallelism: splitting models into stages and GPipe micro-batching, checked against the unsplit model."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from sparkml_par.errors import ConfigError
from sparkml_par.models import build_model
from sparkml_par.parallel.staged import StagedModel, split_into_stages, to_sequential

torch.set_num_threads(1)

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _forward_backward(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    out = model(x)
    F.cross_entropy(out, y.to(out.device)).backward()
    return out.detach().cpu(), [p.grad.detach().cpu() for p in model.parameters()]


def _assert_split_matches(model: nn.Module, shape, num_stages: int, micro_batches: int, devices=None):
    torch.manual_seed(1)
    x, y = torch.randn(12, *shape), torch.randint(0, 5, (12,))
    split = copy.deepcopy(model)
    pipeline = StagedModel(split_into_stages(split, num_stages), devices or ["cpu"] * num_stages, micro_batches)
    expected_out, expected_grads = _forward_backward(model, x, y)
    out, grads = _forward_backward(pipeline, x, y)
    torch.testing.assert_close(out, expected_out, rtol=0, atol=1e-6)
    assert len(grads) == len(expected_grads)
    for grad, expected in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("num_stages", [2, 3])
@pytest.mark.parametrize("micro_batches", [1, 4])
def test_mlp_pipeline_matches_unsplit_model(num_stages, micro_batches):
    torch.manual_seed(0)
    model = build_model("mlp", {"hidden": [32, 16]}, input_shape=(10,), num_outputs=5)
    _assert_split_matches(model, (10,), num_stages, micro_batches)


@pytest.mark.parametrize("num_stages", [2, 3])
@pytest.mark.parametrize("micro_batches", [1, 4])
def test_cnn_pipeline_matches_unsplit_model_in_eval_mode(num_stages, micro_batches):
    # Eval mode: BatchNorm uses its running statistics, the same for any batch split (see below).
    torch.manual_seed(0)
    model = build_model("cnn", {"channels": [4, 8], "hidden": 16}, input_shape=(1, 8, 8), num_outputs=5).eval()
    _assert_split_matches(model, (64,), num_stages, micro_batches)


def test_transformer_pipeline_matches_unsplit_model():
    torch.manual_seed(0)
    model = build_model(
        "transformer", {"d_model": 8, "nhead": 2, "layers": 2, "dropout": 0.0}, input_shape=(6, 3), num_outputs=5
    )
    _assert_split_matches(model, (18,), 3, 4)


def test_batchnorm_in_training_mode_depends_on_micro_batches():
    # In training mode BatchNorm normalises with the statistics of the batch it sees; with
    # micro-batching each stage sees one micro-batch at a time, so means and variances (and hence
    # outputs and gradients) are per micro-batch. One micro-batch is still exact; several are not.
    torch.manual_seed(0)
    model = build_model("mlp", {"hidden": [16], "batchnorm": True}, input_shape=(10,), num_outputs=5)
    _assert_split_matches(model, (10,), 2, 1)
    x = torch.randn(12, 10)
    pipeline = StagedModel(split_into_stages(copy.deepcopy(model), 2), ["cpu", "cpu"], micro_batches=4)
    assert (pipeline(x) - model(x)).abs().max() > 1e-3


def test_forward_follows_the_fill_drain_schedule():
    order = []

    class Record(nn.Module):
        def __init__(self, stage):
            super().__init__()
            self.stage = stage

        def forward(self, x):
            order.append((self.stage, int(x[0, 0]) // 2))  # rows 2i and 2i+1 form micro-batch i
            return x

    pipeline = StagedModel([Record(s) for s in range(3)], ["cpu"] * 3, micro_batches=4)
    out = pipeline(torch.arange(8.0).reshape(8, 1))
    assert torch.equal(out, torch.arange(8.0).reshape(8, 1))
    # Tick t runs stage s on micro-batch t - s: stage 0 fills the pipeline while later stages follow.
    assert order == [(0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (2, 0), (0, 3), (1, 2), (2, 1), (1, 3), (2, 2), (2, 3)]


def test_balanced_split_by_parameter_count():
    model = build_model("mlp", {"hidden": [64, 64]}, input_shape=(64,), num_outputs=10)
    # Layers: Flatten, Linear 4160, ReLU, Linear 4160, ReLU, Linear 650.
    stages = split_into_stages(model, 2)
    assert [[type(m).__name__ for m in stage] for stage in stages] == [
        ["Flatten", "Linear", "ReLU"],
        ["Linear", "ReLU", "Linear"],
    ]
    stages = split_into_stages(model, 3)
    assert [len(stage) for stage in stages] == [2, 2, 2]
    assert sum(len(stage) for stage in split_into_stages(model, 6)) == 6


def test_stages_share_the_model_layers():
    model = build_model("mlp", {"hidden": [8]}, input_shape=(4,), num_outputs=2)
    stages = split_into_stages(model, 2, boundaries=[2])
    assert stages[0][1] is model[1] and stages[1][1] is model[3]
    pipeline = StagedModel(stages, ["cpu", "cpu"])
    assert {id(p) for p in pipeline.parameters()} == {id(p) for p in model.parameters()}


def test_explicit_boundaries():
    model = build_model("cnn", {}, input_shape=(1, 8, 8), num_outputs=10)
    stages = split_into_stages(model, 3, boundaries=[1, 9])
    assert [len(stage) for stage in stages] == [1, 8, len(model) - 9]


@pytest.mark.parametrize(
    "num_stages,boundaries,message",
    [
        (7, None, "train.pipeline_stages=7 but the model has only 6 layers; use at most 6 stages"),
        (0, None, "train.pipeline_stages: 0 must be at least 1"),
        (3, [2], "3 stages need 2 boundaries"),
        (3, [4, 2], "must be strictly increasing layer indices between 1 and 5"),
        (2, [6], "must be strictly increasing layer indices between 1 and 5"),
        (2, [0], "must be strictly increasing layer indices between 1 and 5"),
    ],
)
def test_split_errors(num_stages, boundaries, message):
    model = build_model("mlp", {}, input_shape=(4,), num_outputs=2)
    with pytest.raises(ConfigError) as err:
        split_into_stages(model, num_stages, boundaries)
    assert message in str(err.value)


def test_one_device_per_stage():
    model = build_model("mlp", {}, input_shape=(4,), num_outputs=2)
    with pytest.raises(ConfigError, match=r"pipeline has 2 stages but 1 devices \(\['cpu'\]\)"):
        StagedModel(split_into_stages(model, 2), ["cpu"])


def test_batch_smaller_than_micro_batches():
    torch.manual_seed(0)
    model = build_model("mlp", {"hidden": [8]}, input_shape=(4,), num_outputs=2)
    pipeline = StagedModel.from_model(copy.deepcopy(model), ["cpu", "cpu"], micro_batches=8)
    x = torch.randn(3, 4)
    torch.testing.assert_close(pipeline(x), model(x), rtol=0, atol=1e-6)


def test_to_sequential():
    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(3, 4)
            self.head = nn.Linear(4, 2)

        def forward(self, x):
            return self.head(self.body(x))

        def as_sequential(self):
            return nn.Sequential(self.body, self.head)

    wrapped = Wrapped()
    assert [m for m in to_sequential(wrapped)] == [wrapped.body, wrapped.head]
    with pytest.raises(ConfigError, match="Linear is not an nn.Sequential and has no as_sequential"):
        to_sequential(nn.Linear(2, 2))


@CUDA
@pytest.mark.parametrize("devices", [["cpu", "cuda:0"], ["cuda:0", "cuda:0", "cuda:0"]])
def test_pipeline_across_devices_matches_unsplit_model(devices):
    torch.manual_seed(0)
    model = build_model("mlp", {"hidden": [32, 16]}, input_shape=(10,), num_outputs=5)
    # GPU kernels may sum in another order than the CPU, hence the looser tolerance.
    x, y = torch.randn(12, 10), torch.randint(0, 5, (12,))
    expected_out, expected_grads = _forward_backward(model, x, y)
    pipeline = StagedModel.from_model(copy.deepcopy(model), devices, micro_batches=4)
    out, grads = _forward_backward(pipeline, x, y)
    assert pipeline.stages[-1][0].weight.device.type == "cuda"
    torch.testing.assert_close(out, expected_out, rtol=1e-5, atol=1e-5)
    for grad, expected in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-5)
