"""Early stopping decisions for min and max modes, min_delta, patience and saved state."""

from __future__ import annotations

import io
import math

import pytest
import torch

from sparkml_par.config import EarlyStoppingConfig
from sparkml_par.errors import ConfigError
from sparkml_par.train.early_stopping import EarlyStopping


def _decisions(stopper: EarlyStopping, values) -> list[bool]:
    return [stopper.update(v) for v in values]


def test_min_mode_stops_after_patience_epochs_without_improvement():
    stopper = EarlyStopping("val_loss", "min", patience=2)
    assert _decisions(stopper, [1.0, 0.8, 0.9, 0.7, 0.75, 0.8]) == [False, False, False, False, False, True]
    assert stopper.best == 0.7 and stopper.bad_epochs == 2


def test_max_mode():
    stopper = EarlyStopping("val_accuracy", "max", patience=1)
    assert _decisions(stopper, [0.5, 0.6, 0.6]) == [False, False, True]
    assert stopper.best == 0.6


def test_min_delta_ignores_small_improvements():
    stopper = EarlyStopping("val_loss", "min", patience=2, min_delta=0.1)
    # 0.95 and 0.92 are better than 1.0 but not by 0.1; 0.85 is.
    assert _decisions(stopper, [1.0, 0.95, 0.85, 0.8, 0.78]) == [False, False, False, False, True]
    assert stopper.best == 0.85


def test_improved_flag_marks_new_best_epochs():
    stopper = EarlyStopping("val_loss", "min", patience=3)
    flags = []
    for value in [1.0, 1.1, 0.9, 0.9]:
        stopper.update(value)
        flags.append(stopper.improved)
    assert flags == [True, False, True, False]


def test_patience_zero_never_stops():
    stopper = EarlyStopping("val_loss", "min", patience=0)
    assert not any(_decisions(stopper, [1.0] + [2.0] * 50))
    assert stopper.best == 1.0


def test_nan_is_never_an_improvement():
    stopper = EarlyStopping("val_loss", "min", patience=2)
    assert _decisions(stopper, [math.nan, 1.0, math.nan, math.nan]) == [False, False, False, True]
    assert stopper.best == 1.0


def test_same_values_same_decisions():
    values = [0.9, 0.85, 0.86, 0.84, 0.841, 0.9, 0.83, 0.9, 0.9]
    first = EarlyStopping("val_loss", "min", patience=2, min_delta=0.005)
    second = EarlyStopping("val_loss", "min", patience=2, min_delta=0.005)
    expected = [False, False, False, False, False, True, False, False, True]
    assert _decisions(first, values) == _decisions(second, values) == expected


def test_state_round_trip_resumes_the_count():
    stopper = EarlyStopping.from_config(EarlyStoppingConfig(monitor="val_loss", mode="min", patience=3))
    _decisions(stopper, [1.0, 0.5, 0.6])
    buffer = io.BytesIO()
    torch.save(stopper.state_dict(), buffer)
    buffer.seek(0)
    resumed = EarlyStopping("val_loss", "min", patience=3)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert (resumed.best, resumed.bad_epochs) == (0.5, 1)
    assert _decisions(resumed, [0.7, 0.7]) == [False, True]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"mode": "lowest"}, "train.early_stopping.mode: 'lowest' is not 'min' or 'max'"),
        ({"patience": -1}, "patience=-1 and min_delta=0.0 must not be negative"),
    ],
)
def test_invalid_settings(kwargs, message):
    args = {"monitor": "val_loss", "mode": "min", "patience": 1, "min_delta": 0.0, **kwargs}
    with pytest.raises(ConfigError) as err:
        EarlyStopping(**args)
    assert message in str(err.value)
