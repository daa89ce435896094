"""Model builders by name, shared by training, tuning and scoring.

A builder takes `input_shape` and `num_outputs` (what the data dictates) plus keyword arguments from
`train.model_args` (what the user chooses). A model is described by a plain `model_spec` dict, saved
with the artifact, so scoring can rebuild the network without the training config or code globals.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import json
from typing import Any, Callable

import torch.nn as nn

from sparkml_par.errors import ConfigError

ModelBuilder = Callable[..., nn.Module]

_BUILDERS: dict[str, ModelBuilder] = {}


def register_model(name: str) -> Callable[[ModelBuilder], ModelBuilder]:
    """Decorator that makes a builder available as `train.model: <name>`."""
    if ":" in name:
        raise ConfigError(
            f"model name {name!r} may not contain ':'; a colon marks an import path 'pkg.module:function'"
        )

    def decorate(builder: ModelBuilder) -> ModelBuilder:
        if _BUILDERS.get(name, builder) is not builder:
            raise ConfigError(
                f"model name {name!r} is already registered by {_BUILDERS[name].__module__}; "
                f"pick another name for {builder.__module__}.{builder.__qualname__}"
            )
        _BUILDERS[name] = builder
        return builder

    return decorate


def registered_models() -> list[str]:
    """Names `build_model` accepts besides import paths."""
    return sorted(_BUILDERS)


def build_model(name: str, args: dict[str, Any], *, input_shape: tuple[int, ...], num_outputs: int) -> nn.Module:
    """Builds the model `name` (registry name or 'pkg.module:function') with keyword `args`."""
    builder = _resolve(name)
    kwargs = dict(args, input_shape=tuple(int(d) for d in input_shape), num_outputs=int(num_outputs))
    try:
        # Bind before calling so a wrong model_args key is reported as such, not as a TypeError from inside.
        inspect.signature(builder).bind(**kwargs)
    except TypeError as exc:
        raise ConfigError(
            f"train.model_args {args!r} do not fit model {name!r}: {exc}; its parameters are {_parameters(builder)}"
        ) from None
    model = builder(**kwargs)
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model builder {name!r} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def model_spec(
    name: str,
    args: dict[str, Any],
    input_shape: tuple[int, ...],
    num_outputs: int,
    target_scale: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """A JSON-able description from which `build_from_spec` rebuilds the same architecture.

    `target_scale` (a regression label's mean and standard deviation) ends the model with a TargetScale.
    """
    spec = {
        "name": name,
        "args": dict(args),
        "input_shape": [int(d) for d in input_shape],
        "num_outputs": int(num_outputs),
    }
    if target_scale is not None:
        spec["target_scale"] = [float(v) for v in target_scale]
    try:
        # The round trip also turns tuples into lists, so a spec equals itself after saving and loading.
        return json.loads(json.dumps(spec))
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"train.model_args {args!r} must hold plain values (numbers, strings, lists, "
            f"mappings) so the model can be saved and rebuilt: {exc}"
        ) from None


def build_from_spec(spec: dict[str, Any]) -> nn.Module:
    """Rebuilds a model from a saved `model_spec` (weights are loaded separately)."""
    from sparkml_par.models.layers import TargetScale

    model = build_model(
        spec["name"], spec["args"], input_shape=tuple(spec["input_shape"]), num_outputs=spec["num_outputs"]
    )
    if "target_scale" not in spec:
        return model
    scale = TargetScale(*spec["target_scale"])
    # Appended to a sequence of layers, so a pipeline-parallel split still sees consecutive layers.
    return model.append(scale) if isinstance(model, nn.Sequential) else nn.Sequential(model, scale)


def _resolve(name: str) -> ModelBuilder:
    if ":" in name:
        return _import_builder(name)
    if name in _BUILDERS:
        return _BUILDERS[name]
    close = difflib.get_close_matches(name, list(_BUILDERS), n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ConfigError(
        f"train.model: unknown model {name!r}; {hint}registered models are "
        f"{', '.join(registered_models())}, or give an import path 'pkg.module:function'"
    )


def _import_builder(path: str) -> ModelBuilder:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr or ":" in attr:
        raise ConfigError(f"train.model: import path {path!r} must look like 'pkg.module:function'")
    try:
        builder = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"train.model: cannot load {path!r}: {type(exc).__name__}: {exc}; check that the "
            f"module is installed on the driver and every executor"
        ) from None
    if not callable(builder):
        raise ConfigError(f"train.model: {path!r} is a {type(builder).__name__}, not a function")
    return builder


def _parameters(builder: ModelBuilder) -> str:
    names = [p for p in inspect.signature(builder).parameters if p not in ("input_shape", "num_outputs")]
    return ", ".join(names) or "(none besides input_shape and num_outputs)"
