"""The model artifact: everything scoring needs, nothing that needs the training code's globals.

A directory with `weights.pt` (a state_dict, read back with `weights_only=True`), `model.json` (the
registry spec plus the dataset facts scoring checks against), `metrics.json` and the `config.yaml`
that produced it. It is written beside its final place and renamed into it, so a crash never
leaves a half-written artifact where a scorer would find it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sparkml_par.atomic import replace_directory
from sparkml_par.contract import CONFIG_COPY, MODEL_DESCRIPTION, MODEL_METRICS, WEIGHTS
from sparkml_par.errors import SparkmlParError
from sparkml_par.models.registry import build_from_spec


def write_model_artifact(
    directory: str | os.PathLike,
    state_dict: dict[str, torch.Tensor],
    description: dict[str, Any],
    metrics: dict[str, Any],
    config_yaml: str,
) -> Path:
    """`description` holds at least `spec` (see models.registry.model_spec) and the dataset facts."""
    target = Path(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        torch.save({k: v.detach().cpu() for k, v in state_dict.items()}, staging / WEIGHTS)
        (staging / MODEL_DESCRIPTION).write_text(json.dumps(description, indent=2, default=str))
        (staging / MODEL_METRICS).write_text(json.dumps(metrics, indent=2))
        (staging / CONFIG_COPY).write_text(config_yaml)
        replace_directory(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def load_model_artifact(directory: str | os.PathLike) -> tuple[nn.Module, dict[str, Any]]:
    """(model in eval mode on the CPU, description); clear errors for a missing or incomplete artifact."""
    path = Path(str(directory).removeprefix("file://"))
    if not path.is_dir():
        raise SparkmlParError(
            f"model artifact {str(directory)!r} does not exist; train a model first "
            f"(sparkml-par train) or point score.model at an artifact directory"
        )
    missing = [name for name in (WEIGHTS, MODEL_DESCRIPTION) if not (path / name).is_file()]
    if missing:
        raise SparkmlParError(
            f"model artifact {str(directory)!r} is incomplete: {', '.join(missing)} missing; "
            f"re-run training to write it again"
        )
    description = json.loads((path / MODEL_DESCRIPTION).read_text())
    model = build_from_spec(description["spec"])
    model.load_state_dict(torch.load(path / WEIGHTS, map_location="cpu", weights_only=True))
    return model.eval(), description
