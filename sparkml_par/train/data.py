"""Each rank's shard of a petastorm dataset as PyTorch batches; the trainer's only petastorm import.

petastorm's `make_batch_reader` picks the shard (row groups i with i % size == rank) and shuffles
row-group order (seeded, one worker thread: reproducible); rows arrive as column batches, are mixed in
a seeded shuffle buffer, and leave as tensors without a per-row Python step (petastorm's row-wise
loaders run Python for every row). Every rank yields exactly `steps` batches per
epoch, re-reading its shard from the start when it runs out, so no rank can wait forever in an
all-reduce another rank never joins.

Each row group's columns come over as the Arrow table petastorm's worker read (`_ArrowTables`), and the
feature vectors become one matrix straight from Arrow's value buffer: petastorm's own conversion turns a
list column into one numpy array per row and `np.vstack`s them, a per-row Python step again, which would
be most of a pass over a shard.
"""

from __future__ import annotations

import warnings
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from sparkml_par.contract import FEATURES
from sparkml_par.errors import SparkmlParError

# petastorm 0.12 uses pyarrow APIs deprecated since pyarrow 2-5, which warn on every supported stack, and
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

    def epoch(self, epoch: int, steps: int, start: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches `start` to `steps` of the epoch's exactly `steps` batches of `batch_size` rows; the order
        depends only on (seed, epoch, rank), so a resume at batch `start` reads the rows before it again
        (without making tensors of them) and continues with the batch an uninterrupted run trains next."""
        rng = np.random.default_rng([self.seed, epoch, self.rank])
        passes = self._cached_passes(rng) if self._cache else self._passes(rng)
        for index, (x, y) in enumerate(self._batched(passes, rng)):
            if index >= start:
                yield torch.from_numpy(x), torch.as_tensor(y, dtype=self.label_dtype)
            if index + 1 == steps:
                return

    def all_rows(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The whole shard once, in file order, in batches: for evaluation."""
        for x, y in self._read(num_epochs=1, seed=None):
            for start in range(0, len(x), self.batch_size):
                yield (
                    torch.from_numpy(x[start : start + self.batch_size]),
                    torch.as_tensor(y[start : start + self.batch_size], dtype=self.label_dtype),
                )

    def _passes(self, rng: np.random.Generator) -> Iterator[Iterator[tuple[np.ndarray, np.ndarray]]]:
        """The shard over and over, each pass a reader of its own with a seed drawn from rng.

        petastorm's own repetition (num_epochs=None) re-shuffles the row-group order again each time
        its ventilator waits for queue room at the start of a pass, so the order would depend on timing.
        """
        while True:
            yield self._read(num_epochs=1, seed=int(rng.integers(2**31)))

    def _cached_passes(self, rng: np.random.Generator) -> Iterator[Iterator[tuple[np.ndarray, np.ndarray]]]:
        if self._cached is None:
            parts = list(self._read(num_epochs=1, seed=None))
            self._cached = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        x, y = self._cached
        while True:
            if self.shuffle:
                order = rng.permutation(len(x))
                yield iter([(x[order], y[order])])
            else:
                yield iter([(x, y)])

    def _batched(self, passes, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Batches through a seeded buffer that holds `shuffle_buffer` rows back to mix them with the next
        row group's; at the end of a pass the buffer empties, so `steps` batches of a shard no larger than
        the epoch's rows draw each row once and open no second reader. Rows short of a batch carry over."""
        held = self.shuffle_buffer if self.shuffle else 0
        buffer_x = buffer_y = None
        for chunks in passes:
            rows = 0
            for x, y in chunks:
                rows += len(y)
                if buffer_x is None or len(buffer_x) == 0:
                    buffer_x, buffer_y = x, y
                else:
                    buffer_x, buffer_y = np.concatenate([buffer_x, x]), np.concatenate([buffer_y, y])
                if self.shuffle and len(x):
                    order = rng.permutation(len(buffer_x))
                    buffer_x, buffer_y = buffer_x[order], buffer_y[order]
                buffer_x, buffer_y = yield from self._take_batches(buffer_x, buffer_y, keep=held)
            if rows == 0:
                raise SparkmlParError(
                    f"rank {self.rank} of {self.size} has no rows in {self.url}: the dataset has fewer row groups "
                    f"with rows than ranks; prepare it with at least {self.size} shards or train on fewer ranks"
                )
            buffer_x, buffer_y = yield from self._take_batches(buffer_x, buffer_y, keep=0)

    def _take_batches(self, x: np.ndarray, y: np.ndarray, keep: int):
        """Yields batches off the front of (x, y) while at least `keep` rows would stay; returns the rest."""
        while len(x) >= self.batch_size + keep:
            yield x[: self.batch_size], y[: self.batch_size]
            x, y = x[self.batch_size :], y[self.batch_size :]
        return x, y

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
            reader._results_queue_reader = _ArrowTables()
            for table in reader:
                # Copies: torch's tensors of them are writable, not views of Arrow's read-only buffers.
                yield _matrix(table.column(FEATURES), self.url), table.column(self.label).to_numpy().copy()


class _ArrowTables:
    """petastorm's results-queue reader for `make_batch_reader`, handing each row group over as the Arrow
    table its worker read, without petastorm's conversion to numpy (see the module's docstring).

    The reader asks its worker class for this object (`ArrowReaderWorker.new_results_queue_reader`) and
    calls nothing else of it on the batched path, so the trainer's reader swaps it in before the first row.
    """

    batched_output = True

    def read_next(self, workers_pool, schema, ngram) -> pa.Table:
        from petastorm.workers_pool import EmptyResultError

        try:
            return workers_pool.get_results()
        except EmptyResultError:
            raise StopIteration from None


def _matrix(column: pa.ChunkedArray, url: str) -> np.ndarray:
    """A list column of equal-length vectors as one writable float32 matrix [rows, length]."""
    lists = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if not (
        pa.types.is_list(lists.type) or pa.types.is_large_list(lists.type) or pa.types.is_fixed_size_list(lists.type)
    ):
        raise SparkmlParError(
            f"column {FEATURES!r} of {url} is {lists.type}, not a list of numbers; the trainer reads datasets "
            f"written by sparkml-par prepare, whose features are one vector per row"
        )
    lengths = pc.min_max(pc.list_value_length(lists))
    if lists.null_count or lengths["min"] != lengths["max"]:
        raise SparkmlParError(
            f"column {FEATURES!r} of {url} holds vectors of lengths {lengths['min']} to {lengths['max']}"
            f"{' and empty rows' if lists.null_count else ''} in one row group; the trainer needs one "
            f"length for every row: prepare the dataset again with sparkml-par prepare"
        )
    values = lists.flatten().to_numpy(zero_copy_only=False)
    return values.reshape(len(lists), -1).astype(np.float32)
