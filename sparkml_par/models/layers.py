"""Small layers that let every model be one `nn.Sequential`, so the pipeline splitter can cut it."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from sparkml_par.errors import SparkmlParError


class TargetScale(nn.Module):
    """Maps a standardized output back to the label's units: `mean + std * x`.

    A regression label far from zero (a price, a disease score of 25..346) would take an optimizer
    thousands of steps to reach at a normal learning rate; with the label's train-split mean and
    standard deviation as the last layer the network predicts values near 0 and 1, as a scaled feature
    does, and every consumer (loss, metrics, scoring) still sees the label's own units.
    """

    def __init__(self, mean: float, std: float):
        super().__init__()
        self.register_buffer("mean", torch.tensor(float(mean)))
        self.register_buffer("std", torch.tensor(float(std)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mean + self.std * x


class ImageRows(nn.Module):
    """A [channels, height, width] image as a sequence of its rows: height tokens of channels x width values."""

    def __init__(self, shape: tuple[int, int, int]):
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        channels, height, width = self.shape
        return (
            x.reshape(x.shape[0], channels, height, width)
            .permute(0, 2, 1, 3)
            .reshape(x.shape[0], height, channels * width)
        )


class Reshape(nn.Module):
    """Views each sample as `shape`: datasets store images and sequences as flat float vectors."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if math.prod(x.shape[1:]) != math.prod(self.shape):
            raise SparkmlParError(
                f"model input of shape {tuple(x.shape[1:])} per sample does not fit the declared "
                f"input_shape {list(self.shape)}; check the dataset's feature size"
            )
        return x.reshape(x.shape[0], *self.shape)

    def extra_repr(self) -> str:
        return f"shape={self.shape}"


class MeanPool(nn.Module):
    """Averages over the sequence dimension: one vector per sample for the head."""

    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=self.dim)


class PositionEmbedding(nn.Module):
    """Adds a learned embedding per position: attention alone does not know the order of tokens."""

    def __init__(self, seq_len: int, d_model: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, seq_len, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.weight
