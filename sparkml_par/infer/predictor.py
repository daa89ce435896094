"""The model of an artifact as a function from a feature matrix to predictions, in one process.

Spark scoring and the in-process baseline call the same `Predictor`, so they compute the same
thing; each Python worker keeps one per (artifact, device) in a module-level cache, because
loading weights for every batch (or every task) would cost more than scoring.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
import torch

from sparkml_par.contract import PREDICTION, PROBABILITIES
from sparkml_par.launch.gpus import device_indices
from sparkml_par.train.artifact import load_model_artifact, publication

_CACHE: dict[tuple[str, str, int], "Predictor"] = {}
_CACHE_LOCK = threading.Lock()


class Predictor:
    """An artifact's model on one device: (rows, features) float32 in, a dict of output columns out."""

    def __init__(self, model: torch.nn.Module, description: dict[str, Any], device: str = "cpu"):
        self.description = description
        self.task = description["task"]
        self.input_shape = [int(d) for d in description["spec"]["input_shape"]]
        self.num_features = input_size(description)
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()

    @torch.no_grad()
    def predict(self, features: np.ndarray) -> dict[str, np.ndarray]:
        """Classification: class index (int64) and softmax probabilities (float32); regression: the value."""
        array = np.ascontiguousarray(features, dtype=np.float32)
        # Arrow's zero-copy buffers are read-only and torch warns about them; the model never writes its input,
        # but a copy of a read-only batch costs little next to the forward pass and keeps the console quiet.
        x = torch.from_numpy(array if array.flags.writeable else array.copy()).to(self.device)
        out = self.model(x.reshape([-1] + self.input_shape)).float()
        if self.task == "classification":
            probabilities = torch.softmax(out, dim=1)
            return {
                PREDICTION: probabilities.argmax(dim=1).cpu().numpy().astype(np.int64),
                PROBABILITIES: probabilities.cpu().numpy(),
            }
        return {PREDICTION: out.reshape(len(out), -1)[:, 0].cpu().numpy()}

    def predict_batches(self, features: np.ndarray, batch_size: int) -> dict[str, np.ndarray]:
        """All rows of an in-memory matrix, `batch_size` rows per model call, outputs concatenated."""
        parts = [self.predict(features[start : start + batch_size]) for start in range(0, len(features), batch_size)]
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]} if parts else {}


def input_size(description: dict[str, Any]) -> int:
    """Length of the flat `features` array the model reads (the product of its input shape)."""
    return math.prod(int(d) for d in description["spec"]["input_shape"])


def load_predictor(artifact_dir: str, device: str = "cpu") -> Predictor:
    model, description = load_model_artifact(artifact_dir)
    return Predictor(model, description, device)


def cached_predictor(artifact_dir: str, device: str) -> Predictor:
    """The process's predictor of this artifact on this device, loaded on first use.

    Spark reuses Python workers across jobs: the artifact's publication is part of the key, so an
    artifact retrained in place is loaded again instead of served stale from the cache.
    """
    key = (artifact_dir, device, publication(artifact_dir))
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = load_predictor(artifact_dir, device)
        return _CACHE[key]


def task_device() -> str:
    """The GPU Spark assigned to the current task, any visible GPU outside Spark, else the CPU."""
    if not torch.cuda.is_available():
        return "cpu"
    from pyspark import TaskContext

    context = TaskContext.get()
    gpus = context.resources().get("gpu") if context is not None else None
    if gpus is not None and gpus.addresses:
        return f"cuda:{device_indices(tuple(gpus.addresses))[0]}"
    return "cuda:0"
