"""The search space: tune.space entries as Optuna distributions, grid points, and params applied to a Config.

Keys are `train.*` settings (`train.lr`, `train.model_args.hidden`, `train.early_stopping.patience`);
the prefix may be left out (`lr`).
Optuna stores only scalar choices (None, bool, int, float, str), so a choice among lists or mappings
(`train.model_args.hidden: [[32], [64, 32]]`) is stored as the JSON text of each value and decoded
when the params are applied.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from sparkml_par.config import Config, ParamSpace, load_config
from sparkml_par.errors import ConfigError

# Set by the search for every trial; a space that chose them would be overwritten silently.
_SET_BY_TUNE = {
    "train.output": "each trial writes under tune.output/trials/<number>",
    "train.num_proc": "each trial trains in one process (the best config is retrained with train.num_proc)",
    "train.launcher": "each trial is one Spark task",
}
_SCALAR_TYPES = (type(None), bool, int, float, str)


@dataclass(frozen=True)
class SearchSpace:
    """The validated tune.space, in its declared order."""

    params: dict[str, ParamSpace]

    @classmethod
    def from_config(cls, space: dict[str, ParamSpace]) -> "SearchSpace":
        """Keys name train settings with or without the `train.` prefix (`lr` is `train.lr`), so that
        command-line overrides such as tune.space.lr.type=loguniform work too."""
        if not space:
            raise ConfigError(
                "tune.space is empty: name at least one train.* setting to search, e.g. "
                "tune.space: {train.lr: {type: loguniform, low: 1.0e-4, high: 1.0e-1}}"
            )
        params = {}
        for given, param in space.items():
            key = _train_key(given)
            if key in params:
                raise ConfigError(f"tune.space names {key!r} twice (as {given!r} and with or without 'train.')")
            if key in _SET_BY_TUNE:
                raise ConfigError(f"tune.space key {given!r} cannot be searched: {_SET_BY_TUNE[key]}")
            if param.type == "int" and (param.low != int(param.low) or param.high != int(param.high)):
                raise ConfigError(
                    f"tune.space.{given}: an int parameter needs whole bounds, got "
                    f"low={param.low!r} high={param.high!r}"
                )
            params[key] = param
        return cls(params)

    def distributions(self) -> dict[str, BaseDistribution]:
        """Optuna's distribution of each key, used by ask() with every sampler."""
        return {key: _distribution(param) for key, param in self.params.items()}

    def grid(self) -> list[dict[str, Any]]:
        """Every combination of the grid points of each key (stored values), the first key varying slowest."""
        points = [_grid_points(key, param) for key, param in self.params.items()]
        return [dict(zip(self.params, combination)) for combination in itertools.product(*points)]

    def decode(self, stored: dict[str, Any]) -> dict[str, Any]:
        """Stored params (as Optuna keeps them) -> the values the config gets."""
        return {key: (json.loads(value) if _json_encoded(self.params[key]) else value) for key, value in stored.items()}

    def describe(self) -> dict[str, Any]:
        """A plain description, saved with the study so a resumed search can be checked against it."""
        return {
            key: {"type": p.type, "low": p.low, "high": p.high, "values": p.values, "grid": p.grid}
            for key, p in self.params.items()
        }


def _train_key(key: str) -> str:
    section = key.split(".", 1)[0]
    if section == "train":
        if key == "train" or key.endswith("."):
            raise ConfigError(f"tune.space key {key!r} must name a train setting, e.g. 'train.lr'")
        return key
    if section in {f.name for f in dataclasses.fields(Config)}:
        raise ConfigError(
            f"tune.space key {key!r} names a {section} setting; a search varies train settings "
            f"only (prepare a dataset per data setting and tune on each)"
        )
    return f"train.{key}"


def _json_encoded(param: ParamSpace) -> bool:
    return param.type == "choice" and not all(isinstance(v, _SCALAR_TYPES) for v in param.values)


def _choices(param: ParamSpace) -> list[Any]:
    if _json_encoded(param):
        return [json.dumps(v, sort_keys=True) for v in param.values]
    return list(param.values)


def _distribution(param: ParamSpace) -> BaseDistribution:
    if param.type == "choice":
        return CategoricalDistribution(_choices(param))
    if param.type == "int":
        return IntDistribution(int(param.low), int(param.high))
    return FloatDistribution(float(param.low), float(param.high), log=param.type == "loguniform")


def _grid_points(key: str, param: ParamSpace) -> list[Any]:
    """`values` when given (the grid points of any type), else `grid` points spread over [low, high]."""
    if param.type == "choice":
        return _choices(param)
    if param.values:
        outside = [v for v in param.values if not param.low <= v <= param.high]
        if outside:
            raise ConfigError(
                f"tune.space.{key}: grid values {outside!r} lie outside [low={param.low!r}, high={param.high!r}]"
            )
        return [int(v) if param.type == "int" else float(v) for v in param.values]
    if param.type == "int":
        return sorted({int(round(v)) for v in np.linspace(param.low, param.high, param.grid)})
    spread = np.geomspace if param.type == "loguniform" else np.linspace
    return [float(v) for v in spread(param.low, param.high, param.grid)]


def apply_params(cfg: Config, params: dict[str, Any], extra: dict[str, Any] | None = None) -> Config:
    """A new Config: cfg with each `train.*` key set to its value, validated like a config file.

    `extra` holds settings the search itself decides (a trial's output directory, one process).
    """
    raw = cfg.to_dict()
    for key, value in {**params, **(extra or {})}.items():
        _set_path(raw, key, value)
    # Each section as one `section=<YAML flow mapping>` override: load_config then applies the same
    # types, bounds and cross-field checks as to a file. (JSON would not do: YAML 1.1 reads 1e-05 as text.)
    overrides = [
        f"{section}={yaml.safe_dump(values, default_flow_style=True, width=math.inf, sort_keys=False)}"
        for section, values in raw.items()
    ]
    return load_config(None, overrides)


def _set_path(raw: dict[str, Any], key: str, value: Any) -> None:
    *sections, name = key.split(".")
    node = raw
    for depth, part in enumerate(sections):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"tune.space key {key!r}: {'.'.join(sections[: depth + 1])} is a value, not a section")
        node = child
    node[name] = value


def check_space_fits(cfg: Config, space: SearchSpace) -> None:
    """Applies every choice and both ends of every range to cfg, one key at a time: an unknown key or a
    value of the wrong type fails here, before any trial, naming the key and the value."""
    for key, param in space.params.items():
        values = param.values if param.type == "choice" else [_bound(param, param.low), _bound(param, param.high)]
        for value in values:
            try:
                apply_params(cfg, {key: value})
            except ConfigError as exc:
                raise ConfigError(f"tune.space.{key} does not fit the config (tried {value!r}): {exc}") from None


def _bound(param: ParamSpace, value: float) -> int | float:
    return int(value) if param.type == "int" else float(value)
