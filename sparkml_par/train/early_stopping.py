"""Early stopping on a validation metric.

The decision depends only on the sequence of values fed to `update`; the training loop feeds the
rank-averaged value, so every rank stops after the same epoch and none is left waiting in a collective.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from sparkml_par.config import EarlyStoppingConfig
from sparkml_par.errors import ConfigError


class EarlyStopping:
    """Stops after `patience` consecutive epochs without an improvement of at least `min_delta`.

    patience 0 never stops (but still tracks the best value). A NaN value is never an improvement.
    """

    def __init__(self, monitor: str, mode: Literal["min", "max"], patience: int, min_delta: float = 0.0):
        if mode not in ("min", "max"):
            raise ConfigError(f"train.early_stopping.mode: {mode!r} is not 'min' or 'max'")
        if patience < 0 or min_delta < 0:
            raise ConfigError(
                f"train.early_stopping: patience={patience!r} and min_delta={min_delta!r} must not be negative"
            )
        self.monitor = monitor
        self.mode = mode
        self.patience = patience
        self.min_delta = min_delta
        self.best: float | None = None
        self.bad_epochs = 0
        self.improved = False

    @classmethod
    def from_config(cls, cfg: EarlyStoppingConfig) -> "EarlyStopping":
        return cls(cfg.monitor, cfg.mode, cfg.patience, cfg.min_delta)

    def update(self, value: float) -> bool:
        """Records one epoch's value; True means stop training now."""
        value = float(value)
        self.improved = not math.isnan(value) and (self.best is None or self._better(value, self.best))
        if self.improved:
            self.best = value
            self.bad_epochs = 0
        else:
            self.bad_epochs += 1
        return self.patience > 0 and self.bad_epochs >= self.patience

    def _better(self, value: float, best: float) -> bool:
        if self.mode == "min":
            return value < best - self.min_delta
        return value > best + self.min_delta

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "bad_epochs": self.bad_epochs, "improved": self.improved}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = state["best"]
        self.bad_epochs = state["bad_epochs"]
        self.improved = state["improved"]
