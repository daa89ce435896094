"""Model registry, built-in models, and gradient accumulation as a pure-torch identity."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from sparkml_par.errors import ConfigError, SparkmlParError
from sparkml_par.models import build_from_spec, build_model, model_spec, register_model, registered_models, registry

torch.set_num_threads(1)

SHAPES = {"mlp": (64,), "cnn": (1, 8, 8), "transformer": (16, 4)}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_builtin_models_are_sequential_and_accept_flat_input(name):
    torch.manual_seed(0)
    shape = SHAPES[name]
    model = build_model(name, {}, input_shape=shape, num_outputs=10).eval()
    assert isinstance(model, nn.Sequential)
    flat = torch.randn(5, math.prod(shape))
    assert model(flat).shape == (5, 10)
    # The structured and the flat form of the same samples give the same outputs.
    assert torch.equal(model(flat.reshape(5, *shape)), model(flat))


def test_registered_names():
    assert registered_models() == ["cnn", "mlp", "transformer"]


def test_mlp_layers_follow_args():
    model = build_model(
        "mlp", {"hidden": [32, 16], "dropout": 0.5, "batchnorm": True}, input_shape=(2, 5), num_outputs=3
    )
    assert [type(m).__name__ for m in model] == [
        "Flatten",
        "Linear",
        "BatchNorm1d",
        "ReLU",
        "Dropout",
        "Linear",
        "BatchNorm1d",
        "ReLU",
        "Dropout",
        "Linear",
    ]
    assert [(m.in_features, m.out_features) for m in model if isinstance(m, nn.Linear)] == [(10, 32), (32, 16), (16, 3)]


def test_mlp_defaults():
    model = build_model("mlp", {}, input_shape=(64,), num_outputs=10)
    assert [type(m).__name__ for m in model] == ["Flatten", "Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert [m.out_features for m in model if isinstance(m, nn.Linear)] == [256, 256, 10]


def test_cnn_channels_and_pooling_stop_at_one_pixel():
    model = build_model("cnn", {"channels": [4, 8, 16, 32], "hidden": 20}, input_shape=(3, 8, 8), num_outputs=2)
    convs = [m for m in model if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels) for c in convs] == [(3, 4), (4, 8), (8, 16), (16, 32)]
    assert sum(isinstance(m, nn.MaxPool2d) for m in model) == 3  # 8 -> 4 -> 2 -> 1, then no more pooling
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model) == 4
    assert model(torch.randn(2, 3 * 8 * 8)).shape == (2, 2)


def test_cnn_reaches_95_percent_on_digits():
    load_digits = pytest.importorskip("sklearn.datasets").load_digits
    torch.manual_seed(0)
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)  # flat 64 floats, as the dataset stores them
    y = torch.tensor(digits.target)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train, test = order[:1400], order[1400:]
    model = build_model("cnn", {}, input_shape=(1, 8, 8), num_outputs=10)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(4):
        model.train()
        for batch in train[torch.randperm(len(train))].split(64):
            optimizer.zero_grad()
            F.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x[test]).argmax(1) == y[test]).float().mean().item()
    assert accuracy > 0.95


def test_transformer_learns_a_sequence_task():
    torch.manual_seed(0)
    x = torch.randn(512, 8, 2)
    y = (x[:, :, 0].mean(dim=1) > 0).long()  # needs every position, not one token
    model = build_model(
        "transformer",
        {"d_model": 16, "nhead": 2, "layers": 1, "dim_feedforward": 32, "dropout": 0.0},
        input_shape=(8, 2),
        num_outputs=2,
    )
    encoder_layers = [m for m in model if isinstance(m, nn.TransformerEncoderLayer)]
    assert len(encoder_layers) == 1 and encoder_layers[0].self_attn.num_heads == 2
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(4):
        for batch in torch.randperm(512).split(32):
            optimizer.zero_grad()
            F.cross_entropy(model(x[batch].flatten(1)), y[batch]).backward()
            optimizer.step()
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    assert accuracy > 0.9


def test_transformer_single_feature_sequence_and_regression_head():
    model = build_model("transformer", {"layers": 3}, input_shape=(12,), num_outputs=1)
    assert sum(isinstance(m, nn.TransformerEncoderLayer) for m in model) == 3
    assert model(torch.randn(4, 12)).shape == (4, 1)


def test_unknown_model_suggests_close_name():
    with pytest.raises(ConfigError) as err:
        build_model("mpl", {}, input_shape=(4,), num_outputs=2)
    assert str(err.value) == (
        "train.model: unknown model 'mpl'; did you mean 'mlp'? registered models are "
        "cnn, mlp, transformer, or give an import path 'pkg.module:function'"
    )


def test_wrong_model_args_name_the_valid_parameters():
    with pytest.raises(
        ConfigError,
        match=r"train.model_args \{'hiden': \[8\]\} do not fit model 'mlp'.*"
        r"its parameters are hidden, dropout, batchnorm",
    ):
        build_model("mlp", {"hiden": [8]}, input_shape=(4,), num_outputs=2)


@pytest.mark.parametrize(
    "name,args,shape,message",
    [
        (
            "cnn",
            {},
            (64,),
            "model 'cnn' needs input_shape [channels, height, width] (images), got [64] from the "
            "dataset's feature_shape; set train.model=mlp (any input) or train.model=transformer",
        ),
        (
            "transformer",
            {},
            (2, 3, 4, 5),
            "model 'transformer' needs input_shape [seq_len, d_in], [seq_len] or an "
            "image's [channels, height, width], got [2, 3, 4, 5]",
        ),
        ("cnn", {"kernel_size": 4}, (1, 8, 8), "kernel_size: 4 must be odd"),
        ("transformer", {"d_model": 10, "nhead": 4}, (8, 2), "d_model=10 must be a positive multiple of nhead=4"),
        ("mlp", {"dropout": 1.0}, (4,), "dropout: 1.0 must be in [0, 1)"),
    ],
)
def test_invalid_model_args(name, args, shape, message):
    with pytest.raises(ConfigError) as err:
        build_model(name, args, input_shape=shape, num_outputs=2)
    assert message in str(err.value)


def test_transformer_reads_an_image_row_by_row():
    torch.manual_seed(0)
    model = build_model("transformer", {"d_model": 8, "nhead": 2, "layers": 1}, input_shape=(3, 4, 5), num_outputs=2)
    images = torch.randn(6, 3, 4, 5)
    rows = model[0](images.reshape(6, -1))
    assert rows.shape == (6, 4, 15)
    # token h holds row h of every channel, channel by channel
    assert torch.equal(rows[:, 2], images[:, :, 2, :].reshape(6, 15))
    assert model(images.reshape(6, -1)).shape == (6, 2)


def test_input_of_the_wrong_size_names_both_shapes():
    model = build_model("cnn", {}, input_shape=(1, 8, 8), num_outputs=10)
    with pytest.raises(
        SparkmlParError,
        match=r"shape \(63,\) per sample does not fit the declared input_shape "
        r"\[1, 8, 8\]",
    ):
        model(torch.randn(2, 63))


def test_import_path_builder(tmp_path, monkeypatch):
    (tmp_path / "custom_models.py").write_text(
        "import torch.nn as nn\n"
        "def build(input_shape, num_outputs, width=4):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0], width), nn.Linear(width, num_outputs))\n"
        "NOT_A_FUNCTION = 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    model = build_model("custom_models:build", {"width": 7}, input_shape=(5,), num_outputs=2)
    assert model[1].out_features == 7 and model[2].out_features == 2
    with pytest.raises(
        ConfigError,
        match=r"'custom_models:missing': AttributeError: module 'custom_models' has "
        r"no attribute 'missing'",
    ):
        build_model("custom_models:missing", {}, input_shape=(5,), num_outputs=2)
    with pytest.raises(ConfigError, match=r"'custom_models:NOT_A_FUNCTION' is a int, not a function"):
        build_model("custom_models:NOT_A_FUNCTION", {}, input_shape=(5,), num_outputs=2)


@pytest.mark.parametrize(
    "path,message",
    [
        (
            "no_such_pkg.models:build",
            "cannot load 'no_such_pkg.models:build': ModuleNotFoundError: No module named 'no_such_pkg'",
        ),
        ("pkg.module:", "import path 'pkg.module:' must look like 'pkg.module:function'"),
        ("a:b:c", "import path 'a:b:c' must look like 'pkg.module:function'"),
    ],
)
def test_bad_import_paths(path, message):
    with pytest.raises(ConfigError) as err:
        build_model(path, {}, input_shape=(4,), num_outputs=2)
    assert message in str(err.value)


def test_register_model(monkeypatch):
    monkeypatch.setattr(registry, "_BUILDERS", dict(registry._BUILDERS))

    @register_model("tiny")
    def build_tiny(*, input_shape, num_outputs):
        return nn.Linear(input_shape[0], num_outputs)

    assert "tiny" in registered_models()
    assert build_model("tiny", {}, input_shape=(3,), num_outputs=2).out_features == 2
    with pytest.raises(ConfigError, match="model name 'tiny' is already registered"):
        register_model("tiny")(lambda **kwargs: nn.Identity())
    with pytest.raises(ConfigError, match="may not contain ':'"):
        register_model("a:b")


def test_builder_must_return_a_module(monkeypatch):
    monkeypatch.setattr(registry, "_BUILDERS", dict(registry._BUILDERS))
    register_model("broken")(lambda *, input_shape, num_outputs: "not a module")
    with pytest.raises(ConfigError, match="model builder 'broken' returned str, not a torch.nn.Module"):
        build_model("broken", {}, input_shape=(3,), num_outputs=2)


def test_spec_rebuilds_the_same_model():
    torch.manual_seed(0)
    spec = model_spec("cnn", {"channels": (8, 16), "hidden": 32}, (1, 8, 8), 10)
    assert spec == {
        "name": "cnn",
        "args": {"channels": [8, 16], "hidden": 32},
        "input_shape": [1, 8, 8],
        "num_outputs": 10,
    }
    original = build_from_spec(spec).eval()
    rebuilt = build_from_spec(json.loads(json.dumps(spec))).eval()
    rebuilt.load_state_dict(original.state_dict())
    x = torch.randn(3, 64)
    assert torch.equal(original(x), rebuilt(x))


def test_spec_rejects_values_that_cannot_be_saved():
    with pytest.raises(ConfigError, match="must hold plain values"):
        model_spec("mlp", {"activation": nn.ReLU}, (4,), 2)


def test_gradient_accumulation_equals_one_large_batch():
    # k backward passes over batches of b with the loss scaled by 1/k sum to the gradient of one pass
    # over k*b samples: the identity behind train.accumulation_steps.
    torch.manual_seed(0)
    model = build_model("mlp", {"hidden": [32, 32]}, input_shape=(10,), num_outputs=3)
    k, b = 4, 8
    x, y = torch.randn(k * b, 10), torch.randint(0, 3, (k * b,))

    F.cross_entropy(model(x), y).backward()
    full = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    for xs, ys in zip(x.split(b), y.split(b)):
        (F.cross_entropy(model(xs), ys) / k).backward()
    for p, expected in zip(model.parameters(), full):
        torch.testing.assert_close(p.grad, expected, rtol=0, atol=1e-5)
