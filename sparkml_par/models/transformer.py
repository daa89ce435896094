"""Small Transformer encoder for sequences given as (seq_len, d_in) or flattened, and for images as rows."""

from __future__ import annotations

import torch.nn as nn

from sparkml_par.errors import ConfigError
from sparkml_par.models.layers import ImageRows, MeanPool, PositionEmbedding, Reshape
from sparkml_par.models.registry import register_model


class SequenceTransformer(nn.Sequential):
    """Token projection + position embedding, `layers` encoder layers, mean pooling, linear head.

    Each encoder layer is its own element of the sequence (not one nn.TransformerEncoder), so the
    pipeline splitter can put layers on different stages.
    """

    def __init__(
        self,
        tokens: nn.Module,
        seq_len: int,
        d_in: int,
        num_outputs: int,
        d_model: int,
        nhead: int,
        layers: int,
        dim_feedforward: int,
        dropout: float,
    ):
        modules: list[nn.Module] = [tokens, nn.Linear(d_in, d_model), PositionEmbedding(seq_len, d_model)]
        modules += [
            nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, batch_first=True, norm_first=True)
            for _ in range(layers)
        ]
        # Pre-norm layers leave the residual stream unnormalised; normalise once before pooling.
        modules += [nn.LayerNorm(d_model), MeanPool(dim=1), nn.Linear(d_model, num_outputs)]
        super().__init__(*modules)


@register_model("transformer")
def build_transformer(
    *,
    input_shape: tuple[int, ...],
    num_outputs: int,
    d_model: int = 64,
    nhead: int = 4,
    layers: int = 2,
    dim_feedforward: int = 128,
    dropout: float = 0.1,
) -> SequenceTransformer:
    """Builder for `train.model: transformer`; input_shape is [seq_len, d_in], [seq_len] (one feature per
    step), or an image's [channels, height, width] (each of its rows is a token)."""
    if len(input_shape) not in (1, 2, 3) or min(input_shape) < 1:
        raise ConfigError(
            f"model 'transformer' needs input_shape [seq_len, d_in], [seq_len] or an image's "
            f"[channels, height, width], got {list(input_shape)!r}; the dataset's feature_shape sets it"
        )
    if d_model < 1 or nhead < 1 or d_model % nhead:
        raise ConfigError(f"train.model_args: d_model={d_model!r} must be a positive multiple of nhead={nhead!r}")
    if layers < 1 or dim_feedforward < 1:
        raise ConfigError(
            f"train.model_args: layers={layers!r} and dim_feedforward={dim_feedforward!r} must be positive"
        )
    if not 0.0 <= dropout < 1.0:
        raise ConfigError(f"train.model_args.dropout: {dropout!r} must be in [0, 1)")
    if len(input_shape) == 3:
        channels, seq_len, width = input_shape
        tokens, d_in = ImageRows(input_shape), channels * width
    else:
        seq_len, d_in = (input_shape[0], input_shape[1] if len(input_shape) == 2 else 1)
        tokens = Reshape((seq_len, d_in))
    return SequenceTransformer(tokens, seq_len, d_in, num_outputs, d_model, nhead, layers, dim_feedforward, dropout)
