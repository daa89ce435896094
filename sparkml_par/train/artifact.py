"""The model artifact: everything scoring needs, nothing that needs the training code's globals.

A directory with `weights.pt` (a state_dict, read back with `weights_only=True`), `model.json` (the
registry spec plus the dataset facts scoring checks against), `metrics.json` and the `config.yaml`
that produced it, at any URL `sparkml_par.io.store` opens. It is published whole (`store.publish_directory`:
renamed into place on a local disk, copied in and marked complete on an object store), so a crash never
leaves a half-written artifact where a scorer would find it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sparkml_par.contract import COMPLETE_MARKER, CONFIG_COPY, MODEL_DESCRIPTION, MODEL_METRICS, WEIGHTS
from sparkml_par.errors import SparkmlParError
from sparkml_par.io.store import Store, publish_directory, require_complete
from sparkml_par.models.registry import build_from_spec


def write_model_artifact(
    directory: str | os.PathLike,
    state_dict: dict[str, torch.Tensor],
    description: dict[str, Any],
    metrics: dict[str, Any],
    config_yaml: str,
) -> str:
    """`description` holds at least `spec` (see models.registry.model_spec) and the dataset facts; returns
    the artifact's URL."""
    target = Store(os.fspath(directory))
    if target.local is not None:
        target.local.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=target.local.parent, prefix=f".{target.local.name}-"))
    else:
        staging = Path(tempfile.mkdtemp(prefix="sparkml_par-artifact-"))
    try:
        torch.save({k: v.detach().cpu() for k, v in state_dict.items()}, staging / WEIGHTS)
        (staging / MODEL_DESCRIPTION).write_text(json.dumps(description, indent=2, default=str))
        (staging / MODEL_METRICS).write_text(json.dumps(metrics, indent=2))
        (staging / CONFIG_COPY).write_text(config_yaml)
        publish_directory(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target.url


def load_model_artifact(directory: str | os.PathLike) -> tuple[nn.Module, dict[str, Any]]:
    """(model in eval mode on the CPU, description); clear errors for a missing or incomplete artifact.

    An artifact on a remote store is read from a local copy, fetched once per process and per publication
    (its marker's content), so every Spark Python worker downloads it once, not once per batch.
    """
    url = os.fspath(directory)
    store = Store(url)
    if not store.exists():
        raise SparkmlParError(
            f"model artifact {url!r} does not exist; train a model first "
            f"(sparkml-par train) or point score.model at an artifact directory"
        )
    require_complete(store, "model artifact", "re-run training to write it again")
    path = store.local if store.local is not None else _local_copy(store)
    missing = [name for name in (WEIGHTS, MODEL_DESCRIPTION) if not (path / name).is_file()]
    if missing:
        raise SparkmlParError(
            f"model artifact {url!r} is incomplete: {', '.join(missing)} missing; re-run training to write it again"
        )
    description = json.loads((path / MODEL_DESCRIPTION).read_text())
    model = build_from_spec(description["spec"])
    model.load_state_dict(torch.load(path / WEIGHTS, map_location="cpu", weights_only=True))
    return model.eval(), description


def artifact_complete(url: str) -> bool:
    """Whether a whole artifact is at url: what the pipeline's train stage checks before skipping."""
    store = Store(url)
    return store.exists(WEIGHTS) and (store.local is not None or store.exists(COMPLETE_MARKER))


def publication(url: str) -> str:
    """What changes each time an artifact is published at url: its weights' modification time on a local
    disk, its marker's content on a remote store; empty when there is no artifact (loading says why)."""
    store = Store(url)
    try:
        if store.local is not None:
            return str(os.stat(store.local / WEIGHTS).st_mtime_ns)
        return store.read_text(COMPLETE_MARKER).strip()
    except OSError:
        return ""


def _local_copy(store: Store) -> Path:
    publication = store.read_text(COMPLETE_MARKER).strip()
    key = hashlib.sha256(f"{store.url}\n{publication}".encode()).hexdigest()[:16]
    copy = Path(tempfile.gettempdir()) / "sparkml_par-artifacts" / key
    if not (copy / COMPLETE_MARKER).exists():
        copy.parent.mkdir(parents=True, exist_ok=True)
        fetched = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=copy.parent))  # beside copy: os.replace renames
        store.download(fetched)
        try:
            os.replace(fetched, copy)
        except OSError:  # another worker of this machine fetched it first
            shutil.rmtree(fetched, ignore_errors=True)
    return copy
