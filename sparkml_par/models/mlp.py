"""Multi-layer perceptron over the flattened input features."""

from __future__ import annotations

import math

import torch.nn as nn

from sparkml_par.errors import ConfigError
from sparkml_par.models.registry import register_model


class MLP(nn.Sequential):
    """Flatten, then Linear [-> BatchNorm] -> ReLU [-> Dropout] per hidden layer, then a linear head."""

    def __init__(self, in_features: int, num_outputs: int, hidden: list[int], dropout: float, batchnorm: bool):
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for size in hidden:
            layers.append(nn.Linear(width, size))
            if batchnorm:
                layers.append(nn.BatchNorm1d(size))
            layers.append(nn.ReLU())
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = size
        layers.append(nn.Linear(width, num_outputs))
        super().__init__(*layers)


@register_model("mlp")
def build_mlp(
    *,
    input_shape: tuple[int, ...],
    num_outputs: int,
    hidden: list[int] = (256, 256),
    dropout: float = 0.0,
    batchnorm: bool = False,
) -> MLP:
    """Builder for `train.model: mlp`; model_args: hidden (layer widths), dropout, batchnorm."""
    if any(int(size) < 1 for size in hidden):
        raise ConfigError(f"train.model_args.hidden: layer widths must be positive, got {list(hidden)!r}")
    if not 0.0 <= dropout < 1.0:
        raise ConfigError(f"train.model_args.dropout: {dropout!r} must be in [0, 1)")
    return MLP(math.prod(input_shape), num_outputs, [int(size) for size in hidden], dropout, batchnorm)
