"""Small layers that let every model be one `nn.Sequential`, so the pipeline splitter can cut it."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from sparkml_par.errors import SparkmlParError


class Reshape(nn.Module):
    """Views each sample as `shape`: datasets store images and sequences as flat float vectors."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if math.prod(x.shape[1:]) != math.prod(self.shape):
            raise SparkmlParError(f"model input of shape {tuple(x.shape[1:])} per sample does not fit the declared "
                                  f"input_shape {list(self.shape)}; check the dataset's feature size")
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
