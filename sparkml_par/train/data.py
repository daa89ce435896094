"""Each rank's shard of a petastorm dataset as PyTorch batches; the trainer's only petastorm import.

petastorm's `make_batch_reader` picks the shard (row groups i with i % size == rank) and shuffles
row-group order (seeded, one worker thread: reproducible); rows arrive as column batches, are mixed in
a seeded shuffle buffer, and leave as tensors without a per-row Python step (petastorm's row-wise
loaders were measured an order of magnitude slower). Every rank yields exactly `steps` batches per
epoch, re-reading its shard from the start when it runs out, so no rank can wait forever in an
all-reduce another rank never joins.
"""

from __future__ import annotations

import warnings
from typing import Iterator

import numpy as np
import torch

from sparkml_par.contract import FEATURES

# petastorm 0.12 uses pyarrow APIs deprecated since pyarrow 2-5 (the reason pyarrow is pinned to 14) and
# advises make_reader for datasets with a Unischema; neither is news to a user, both would flood rank logs.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"petastorm(\.|$)")
warnings.filterwarnings("ignore", message="Please use make_reader", category=UserWarning)


class ShardBatches:
    def __init__(
        self,
        url: str,
        rank: int,
        size: int,
        batch_size: int,
        *,
        label: str,
        shuffle: bool,
        seed: int,
        shuffle_buffer: int = 0,
        cache: bool = False,
        label_dtype: torch.dtype = torch.int64,
    ):
        self.url, self.rank, self.size = url, rank, size
        self.label = label  # the user's label column, as the dataset's manifest names it
        self.batch_size = batch_size
        self.shuffle, self.seed, self.shuffle_buffer = shuffle, seed, shuffle_buffer
        self.label_dtype = label_dtype
        self._cached: tuple[np.ndarray, np.ndarray] | None = None
        self._cache = cache

    def epoch(self, epoch: int, steps: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Exactly `steps` batches of `batch_size` rows; the order depends only on (seed, epoch, rank)."""
        rng = np.random.default_rng([self.seed, epoch, self.rank])
        if self._cache:
            chunks = self._cached_chunks(rng)
        else:
            chunks = self._passes(rng)
        emitted = 0
        for x, y in self._batched(chunks, rng):
            yield torch.from_numpy(x), torch.as_tensor(y, dtype=self.label_dtype)
            emitted += 1
            if emitted == steps:
                return

    def all_rows(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The whole shard once, in file order, in batches: for evaluation."""
        for x, y in self._read(num_epochs=1, seed=None):
            for start in range(0, len(x), self.batch_size):
                yield (
                    torch.from_numpy(x[start : start + self.batch_size]),
                    torch.as_tensor(y[start : start + self.batch_size], dtype=self.label_dtype),
                )

    def _passes(self, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The shard over and over, each pass a reader of its own with a seed drawn from rng.

        petastorm's own repetition (num_epochs=None) re-shuffles the row-group order again each time
        its ventilator waits for queue room at the start of a pass, so the order would depend on timing.
        """
        while True:
            yield from self._read(num_epochs=1, seed=int(rng.integers(2**31)))

    def _cached_chunks(self, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if self._cached is None:
            parts = list(self._read(num_epochs=1, seed=None))
            self._cached = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        x, y = self._cached
        while True:
            if self.shuffle:
                order = rng.permutation(len(x))
                yield x[order], y[order]
            else:
                yield x, y

    def _batched(self, chunks, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        held = self.shuffle_buffer if self.shuffle else 0
        buffer_x = buffer_y = None
        for x, y in chunks:
            if buffer_x is None or len(buffer_x) == 0:
                buffer_x, buffer_y = x, y
            else:
                buffer_x, buffer_y = np.concatenate([buffer_x, x]), np.concatenate([buffer_y, y])
            if self.shuffle and len(x):
                order = rng.permutation(len(buffer_x))
                buffer_x, buffer_y = buffer_x[order], buffer_y[order]
            while len(buffer_x) >= self.batch_size + held:
                yield buffer_x[: self.batch_size], buffer_y[: self.batch_size]
                buffer_x, buffer_y = buffer_x[self.batch_size :], buffer_y[self.batch_size :]

    def _read(self, num_epochs: int | None, seed: int | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        from petastorm import make_batch_reader

        with make_batch_reader(
            self.url,
            schema_fields=[FEATURES, self.label],
            cur_shard=self.rank,
            shard_count=self.size,
            num_epochs=num_epochs,
            workers_count=1,
            shuffle_row_groups=self.shuffle and seed is not None,
            seed=seed,
        ) as reader:
            for batch in reader:
                yield _stack(getattr(batch, FEATURES)), np.array(getattr(batch, self.label))


def _stack(column: np.ndarray) -> np.ndarray:
    """petastorm hands a list column over as an object array of arrays: one contiguous float32 matrix."""
    if column.dtype == object:
        return np.stack(column).astype(np.float32, copy=False)
    return column.astype(np.float32, copy=False)
