"""Checkpoints that survive crashes: atomic writes, keep-K pruning, fingerprinted resume.

A checkpoint is one file, `checkpoint-00007.pt` after 7 whole epochs or `checkpoint-00007-000120.pt` 120
batches into the 8th (a step checkpoint, with the data position to continue from), written through
`sparkml_par.io.store` at any URL train.output names: complete or absent (renamed into place on a local disk
or HDFS, uploaded whole under its name on an object store), so resume finds the previous one when a write
is killed. Files are read back with `torch.load(weights_only=True)`, which runs no pickled code; hence the
state may hold only tensors, dicts, lists, tuples, strings, numbers, booleans and None, and RNG states are
converted to tensors.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import random
import re
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from sparkml_par.config import TrainConfig
from sparkml_par.errors import SparkmlParError
from sparkml_par.io.store import Store

logger = logging.getLogger(__name__)

_CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)(?:-(\d+))?\.pt$")
# What a write killed on a local disk leaves: atomic.atomic_path's hidden sibling, or a mkstemp file
# `.checkpoint-00003.<random>.tmp` that an older checkpoint directory may still hold.
_LEFTOVER = re.compile(r"^\.checkpoint-\d+(-\d+)?\.(tmp-[0-9a-f]+\.pt|.+\.tmp)$")
_PLAIN_SCALARS = (int, float, bool, str, type(None))


def checkpoint_fingerprint(model_spec: dict[str, Any], cfg: TrainConfig, dataset_fingerprint: str = "") -> dict:
    """What a checkpoint must match to be resumed: the model, the state layout, the data.

    Only settings that change what the saved state means are included (optimizer, scheduler,
    precision), so a run may be resumed with more epochs or another learning rate.
    """
    fingerprint = {
        "model": model_spec,
        "optimizer": cfg.optimizer,
        "scheduler": cfg.scheduler,
        "precision": cfg.precision,
        "dataset": dataset_fingerprint,
    }
    return json.loads(json.dumps(fingerprint, sort_keys=True))


def write_checkpoint_atomically(
    directory: str | os.PathLike, epoch: int, state: dict[str, Any], keep: int, position: int = 0
) -> str:
    """Writes `state` (which must hold a `fingerprint`) as checkpoint-{epoch:05d}.pt, or with `position`
    (batches trained of epoch `epoch + 1`) as checkpoint-{epoch:05d}-{position:06d}.pt; keeps the newest `keep`.

    Later checkpoints are deleted: they belong to a run that has since restarted from an earlier point
    (resume=never, or a resume past corrupted files), and resuming from them would mix runs.
    """
    if "fingerprint" not in state:
        raise ValueError("checkpoint state needs a 'fingerprint' entry (see checkpoint_fingerprint)")
    if state.get("epoch", epoch) != epoch:
        raise ValueError(f"checkpoint state says epoch {state['epoch']!r} but is written as epoch {epoch}")
    if keep < 1:
        raise ValueError(f"keep={keep!r}: at least the newest checkpoint must be kept")
    _check_plain(state, "state")
    store = Store(os.fspath(directory))
    buffer = io.BytesIO()
    torch.save({**state, "epoch": epoch, "position": position}, buffer)
    name = f"checkpoint-{epoch:05d}-{position:06d}.pt" if position else f"checkpoint-{epoch:05d}.pt"
    store.write_bytes(name, buffer.getvalue())
    _prune(store, (epoch, position), keep)
    return f"{store.url}/{name}"


def load_latest_checkpoint(directory: str | os.PathLike, fingerprint: dict) -> dict[str, Any] | None:
    """The newest readable checkpoint in `directory` (its state plus `epoch`, `position` and its `url`), or None.

    Unreadable files (a crash mid-copy, a truncated upload) are skipped with a warning each, so an
    older complete checkpoint is used. A checkpoint of another model or config is refused, not skipped:
    silently starting over would discard the other run's work.
    """
    store = Store(os.fspath(directory))
    for _where, name in sorted(_checkpoints(store), reverse=True):
        where = f"{store.url}/{name}"
        try:
            state = torch.load(io.BytesIO(store.read_bytes(name)), map_location="cpu", weights_only=True)
        except Exception as exc:  # any reason a file cannot be read makes it unusable; say which
            logger.warning("skipping checkpoint %s: it cannot be read (%s)", where, _read_error(exc))
            continue
        if not isinstance(state, dict) or "fingerprint" not in state:
            logger.warning("skipping checkpoint %s: it holds no checkpoint fingerprint", where)
            continue
        if _canonical(state["fingerprint"]) != _canonical(fingerprint):
            raise SparkmlParError(_mismatch_message(where, state["fingerprint"], fingerprint))
        return {"position": 0, **state, "url": where}
    return None


def newest_checkpoint(directory: str | os.PathLike) -> str | None:
    """The newest checkpoint's URL by its name, without reading it: for messages about where a run stands."""
    store = Store(os.fspath(directory))
    newest = max(_checkpoints(store), default=None)
    return f"{store.url}/{newest[1]}" if newest else None


def capture_rng_state() -> dict[str, Any]:
    """torch (CPU and CUDA), numpy and python `random` states, as tensors and plain values."""
    version, internal, gauss_next = random.getstate()
    _, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "python": {"version": version, "internal": torch.tensor(internal, dtype=torch.int64), "gauss_next": gauss_next},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Restores what `capture_rng_state` captured; CUDA states only where CUDA is available."""
    torch.set_rng_state(state["torch"])
    numpy_state = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    python_state = state["python"]
    random.setstate((python_state["version"], tuple(python_state["internal"].tolist()), python_state["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _checkpoints(store: Store) -> list[tuple[tuple[int, int], str]]:
    """((whole epochs, batches into the next), name) of every checkpoint in the store."""
    found = []
    for name in store.names():
        match = _CHECKPOINT_NAME.match(name)
        if match:
            found.append(((int(match.group(1)), int(match.group(2) or 0)), name))
    return found


def _read_error(exc: Exception) -> str:
    """The cause in one line; for weights_only refusals the refused content, not torch's advice to load unsafely."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    marker = "WeightsUnpickler error:"
    for i, line in enumerate(lines):
        if marker in line:
            cause = line.split(marker, 1)[1].strip() or (lines[i + 1] if i + 1 < len(lines) else "")
            return f"weights_only load refused it: {cause.split('. ')[0]}"
    return f"{type(exc).__name__}: {lines[0].split('. ')[0] if lines else ''}"


def _prune(store: Store, written: tuple[int, int], keep: int) -> None:
    checkpoints = sorted(_checkpoints(store))
    kept = [name for where, name in checkpoints if where <= written][-keep:]
    for _, name in checkpoints:
        if name not in kept:
            store.delete(name)
    # Leftovers come only from writes that crashed; only one writer (rank 0) uses the directory.
    for name in store.names():
        if _LEFTOVER.match(name):
            store.delete(name)


def _check_plain(value: Any, where: str) -> None:
    """Rejects values `torch.load(weights_only=True)` would refuse, now rather than at resume time."""
    if isinstance(value, torch.Tensor) or type(value) in _PLAIN_SCALARS:
        return
    if type(value) in (dict, OrderedDict):
        for key, item in value.items():
            if type(key) not in (str, int):
                raise TypeError(
                    f"checkpoint {where} has a key {key!r} of type {type(key).__name__}; use str or int keys"
                )
            _check_plain(item, f"{where}[{key!r}]")
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
        return
    raise TypeError(
        f"checkpoint {where} is a {type(value).__module__}.{type(value).__qualname__}; checkpoints "
        f"hold only tensors, dicts, lists, tuples, str, int, float, bool and None "
        f"(convert arrays with torch.from_numpy, numpy scalars with float() or int())"
    )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _short_hash(fingerprint: Any) -> str:
    return hashlib.sha256(_canonical(fingerprint).encode()).hexdigest()[:12]


def _mismatch_message(path: str, found: Any, expected: Any) -> str:
    differences = "; ".join(
        f"{key}: {_canonical(old)} in the checkpoint, {_canonical(new)} now"
        for key, old, new in _differences(found, expected, "")
    )
    return (
        f"checkpoint {path} was written for fingerprint {_short_hash(found)} but this run has fingerprint "
        f"{_short_hash(expected)} ({differences}); use a new train.output directory for a different "
        f"model or config, or set train.resume=never to start over in this one"
    )


def _differences(old: Any, new: Any, prefix: str) -> list[tuple[str, Any, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new), key=str):
            found += _differences(old.get(key), new.get(key), f"{prefix}.{key}" if prefix else str(key))
        return found
    return [] if _canonical(old) == _canonical(new) else [(prefix or "fingerprint", old, new)]
