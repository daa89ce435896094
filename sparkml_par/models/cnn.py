"""Convolutional network for images given as (channels, height, width) or flattened."""

from __future__ import annotations

import torch.nn as nn

from sparkml_par.errors import ConfigError
from sparkml_par.models.layers import Reshape
from sparkml_par.models.registry import register_model


class CNN(nn.Sequential):
    """Conv [-> BatchNorm] -> ReLU -> MaxPool blocks, then a hidden linear layer and a linear head.

    Pooling halves the image only while both sides are at least 2, so tiny images (8x8 digits) keep
    a spatial map through every block.
    """

    def __init__(
        self,
        input_shape: tuple[int, int, int],
        num_outputs: int,
        channels: list[int],
        kernel_size: int,
        hidden: int,
        batchnorm: bool,
        dropout: float,
    ):
        in_channels, height, width = input_shape
        layers: list[nn.Module] = [Reshape(input_shape)]
        for out_channels in channels:
            # A bias before BatchNorm is cancelled by its mean subtraction.
            layers.append(
                nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=not batchnorm)
            )
            if batchnorm:
                layers.append(nn.BatchNorm2d(out_channels))
            layers.append(nn.ReLU())
            if height >= 2 and width >= 2:
                layers.append(nn.MaxPool2d(2))
                height, width = height // 2, width // 2
            in_channels = out_channels
        layers.append(nn.Flatten())
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        layers += [nn.Linear(in_channels * height * width, hidden), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        layers.append(nn.Linear(hidden, num_outputs))
        super().__init__(*layers)


@register_model("cnn")
def build_cnn(
    *,
    input_shape: tuple[int, ...],
    num_outputs: int,
    channels: list[int] = (32, 64),
    kernel_size: int = 3,
    hidden: int = 128,
    batchnorm: bool = True,
    dropout: float = 0.0,
) -> CNN:
    """Builder for `train.model: cnn`; input_shape is [channels, height, width] (e.g. [1, 8, 8] for digits)."""
    if len(input_shape) != 3 or min(input_shape) < 1:
        raise ConfigError(
            f"model 'cnn' needs input_shape [channels, height, width] (images), got "
            f"{list(input_shape)!r} from the dataset's feature_shape; set train.model=mlp (any input) "
            f"or train.model=transformer for this data"
        )
    if not channels or any(int(c) < 1 for c in channels):
        raise ConfigError(
            f"train.model_args.channels: expected a non-empty list of positive channel counts, got {list(channels)!r}"
        )
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ConfigError(
            f"train.model_args.kernel_size: {kernel_size!r} must be odd and positive so the "
            f"padding keeps the image size"
        )
    if hidden < 1:
        raise ConfigError(f"train.model_args.hidden: {hidden!r} must be positive")
    if not 0.0 <= dropout < 1.0:
        raise ConfigError(f"train.model_args.dropout: {dropout!r} must be in [0, 1)")
    return CNN(tuple(input_shape), num_outputs, [int(c) for c in channels], kernel_size, hidden, batchnorm, dropout)
