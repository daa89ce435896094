"""Optimizers, learning-rate scaling, warm-up and per-epoch schedules."""

from __future__ import annotations

import io
import math

import pytest
import torch

from sparkml_par.config import EarlyStoppingConfig, TrainConfig, load_config
from sparkml_par.errors import ConfigError, SparkmlParError
from sparkml_par.train.optim import build_optimizer, build_scheduler, scaled_lr


def _params():
    return [torch.nn.Parameter(torch.ones(2, 2)), torch.nn.Parameter(torch.zeros(2))]


def _lrs_per_epoch(cfg: TrainConfig, epochs: int, metrics=None) -> list[float]:
    optimizer = build_optimizer(_params(), cfg, cfg.lr)
    schedule = build_scheduler(optimizer, cfg, steps_per_epoch=1)
    lrs = [schedule.current_lr()]
    for epoch in range(epochs):
        optimizer.step()
        schedule.step_epoch(None if metrics is None else metrics[epoch])
        lrs.append(schedule.current_lr())
    return lrs


def test_sgd_with_momentum_nesterov_and_weight_decay():
    cfg = TrainConfig(optimizer="sgd", momentum=0.8, nesterov=True, weight_decay=1e-4)
    optimizer = build_optimizer(_params(), cfg, lr=0.3)
    assert type(optimizer) is torch.optim.SGD
    group = optimizer.param_groups[0]
    assert (group["lr"], group["momentum"], group["nesterov"], group["weight_decay"]) == (0.3, 0.8, True, 1e-4)


@pytest.mark.parametrize("name,cls", [("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW)])
def test_adam_variants_take_named_parameters(name, cls):
    model = torch.nn.Linear(3, 2)
    optimizer = build_optimizer(model.named_parameters(), TrainConfig(optimizer=name, weight_decay=0.05), lr=0.01)
    assert type(optimizer) is cls
    assert optimizer.param_groups[0]["params"] == [model.weight, model.bias]
    assert (optimizer.param_groups[0]["lr"], optimizer.param_groups[0]["weight_decay"]) == (0.01, 0.05)


@pytest.mark.parametrize("name,cls", [("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW)])
def test_adam_variants_on_cpu_take_the_fused_kernel_where_torch_has_it_and_its_updates_match_the_loop(name, cls):
    torch.manual_seed(0)
    fused_params = [torch.nn.Parameter(torch.randn(8, 4)), torch.nn.Parameter(torch.randn(8))]
    loop_params = [torch.nn.Parameter(p.detach().clone()) for p in fused_params]
    fused = build_optimizer(fused_params, TrainConfig(optimizer=name, weight_decay=0.01), lr=0.05)
    loop = cls(loop_params, lr=0.05, weight_decay=0.01, foreach=False)
    # torch 2.4 brought the fused kernel to the CPU; torch 2.3 (Databricks 15.4) refuses fused=True there.
    fused_on_cpu = torch.torch_version.TorchVersion(torch.__version__) >= (2, 4)
    assert fused.param_groups[0]["fused"] is (True if fused_on_cpu else None)
    for step in range(5):
        for params, optimizer in ((fused_params, fused), (loop_params, loop)):
            loss = (params[0].sum(dim=1) * params[1]).square().sum() + step
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    for a, b in zip(fused_params, loop_params):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
        assert not torch.equal(a, torch.zeros_like(a))


def test_nesterov_needs_momentum():
    with pytest.raises(ConfigError, match=r"train.nesterov=true needs train.momentum > 0, got 0.0"):
        load_config(None, ["train.optimizer=sgd", "train.momentum=0.0", "train.nesterov=true"])


@pytest.mark.parametrize("scaling,expected", [("linear", 0.4), ("sqrt", 0.2), ("none", 0.1)])
def test_scaled_lr(scaling, expected):
    assert scaled_lr(TrainConfig(lr=0.1, lr_scaling=scaling), 4) == pytest.approx(expected)
    assert scaled_lr(TrainConfig(lr=0.1, lr_scaling=scaling), 1) == pytest.approx(0.1)


def test_warmup_ramps_from_one_rank_lr_to_scaled_lr():
    cfg = TrainConfig(lr=0.1, lr_scaling="linear", warmup_epochs=1.0)
    optimizer = build_optimizer(_params(), cfg, scaled_lr(cfg, 4))
    schedule = build_scheduler(optimizer, cfg, steps_per_epoch=4)
    lrs = [schedule.current_lr()]
    for _ in range(6):
        optimizer.step()
        schedule.step_batch()
        lrs.append(schedule.current_lr())
    assert lrs == pytest.approx([0.1, 0.175, 0.25, 0.325, 0.4, 0.4, 0.4])


def test_fractional_warmup_epochs_and_sqrt_scaling():
    cfg = TrainConfig(lr=0.1, lr_scaling="sqrt", warmup_epochs=0.5)
    optimizer = build_optimizer(_params(), cfg, scaled_lr(cfg, 4))
    schedule = build_scheduler(optimizer, cfg, steps_per_epoch=4)
    lrs = [schedule.current_lr()]
    for _ in range(3):
        optimizer.step()
        schedule.step_batch()
        lrs.append(schedule.current_lr())
    assert lrs == pytest.approx([0.1, 0.15, 0.2, 0.2])


def test_no_warmup_without_scaling():
    cfg = TrainConfig(lr=0.1, lr_scaling="none", warmup_epochs=2.0)
    optimizer = build_optimizer(_params(), cfg, scaled_lr(cfg, 4))
    schedule = build_scheduler(optimizer, cfg, steps_per_epoch=3)
    assert schedule.warmup is None and schedule.current_lr() == 0.1


def test_step_schedule():
    cfg = TrainConfig(lr=1.0, lr_scaling="none", scheduler="step", step_size=2, gamma=0.5)
    assert _lrs_per_epoch(cfg, 5) == pytest.approx([1.0, 1.0, 0.5, 0.5, 0.25, 0.25])


def test_exponential_schedule():
    cfg = TrainConfig(lr=1.0, scheduler="exponential", gamma=0.5)
    assert _lrs_per_epoch(cfg, 3) == pytest.approx([1.0, 0.5, 0.25, 0.125])


def test_cosine_schedule_reaches_zero_after_all_epochs():
    cfg = TrainConfig(lr=1.0, scheduler="cosine", epochs=4)
    expected = [(1 + math.cos(math.pi * e / 4)) / 2 for e in range(5)]
    assert _lrs_per_epoch(cfg, 4) == pytest.approx(expected, abs=1e-12)
    assert expected[2] == pytest.approx(0.5)


def test_constant_without_scheduler():
    assert _lrs_per_epoch(TrainConfig(lr=0.3), 3) == [0.3] * 4


def test_plateau_decays_after_patience_in_min_mode():
    cfg = TrainConfig(
        lr=1.0, scheduler="plateau", gamma=0.5, plateau_patience=10, early_stopping=EarlyStoppingConfig(mode="min")
    )
    # With plateau_patience 10, the 11th epoch without improvement decays the learning rate.
    metrics = [1.0, 0.9] + [0.95] * 12
    lrs = _lrs_per_epoch(cfg, len(metrics), metrics)  # lrs[k] is the learning rate after epoch k
    assert lrs[:13] == [1.0] * 13 and lrs[13:] == [0.5, 0.5]


def test_plateau_follows_early_stopping_mode_and_min_delta():
    stopping = EarlyStoppingConfig(mode="max", min_delta=0.1)
    cfg = TrainConfig(lr=1.0, scheduler="plateau", gamma=0.5, plateau_patience=10, early_stopping=stopping)
    # Rising accuracy keeps the learning rate; rises smaller than min_delta count as stalls.
    assert _lrs_per_epoch(cfg, 12, [0.1 * i for i in range(12)])[-1] == 1.0
    assert _lrs_per_epoch(cfg, 12, [0.5 + 0.005 * i for i in range(12)])[-1] == 0.5


def test_plateau_patience_comes_from_the_config():
    cfg = TrainConfig(
        lr=1.0, scheduler="plateau", gamma=0.5, plateau_patience=2, early_stopping=EarlyStoppingConfig(mode="min")
    )
    lrs = _lrs_per_epoch(cfg, 6, [1.0, 0.9, 0.95, 0.95, 0.95, 0.95])
    assert lrs == [1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5]  # the rate before any epoch, then after each


def test_plateau_needs_a_metric_and_gamma_below_one():
    cfg = TrainConfig(scheduler="plateau")
    schedule = build_scheduler(build_optimizer(_params(), cfg, cfg.lr), cfg, steps_per_epoch=1)
    with pytest.raises(SparkmlParError, match="scheduler=plateau needs the value of train.early_stopping.monitor"):
        schedule.step_epoch()
    with pytest.raises(ConfigError, match=r"train.gamma=1.0: the plateau scheduler .* gamma must be below 1"):
        load_config(None, ["train.scheduler=plateau", "train.gamma=1.0"])


def test_warmup_and_epoch_decay_compose():
    cfg = TrainConfig(lr=0.1, warmup_epochs=2.0, scheduler="step", step_size=1, gamma=0.5)
    optimizer = build_optimizer(_params(), cfg, scaled_lr(cfg, 2))
    schedule = build_scheduler(optimizer, cfg, steps_per_epoch=2)
    lrs = []
    for _ in range(3):
        for _ in range(2):
            optimizer.step()
            schedule.step_batch()
        schedule.step_epoch()
        lrs.append(schedule.current_lr())
    # Warm-up factor (0.1 -> 0.2 over 4 steps) times the step decay (0.5 per epoch).
    assert lrs == pytest.approx([0.15 * 0.5, 0.2 * 0.25, 0.2 * 0.125])


@pytest.mark.parametrize("scheduler", ["step", "exponential", "cosine", "plateau"])
def test_state_dict_round_trip_continues_the_same_schedule(scheduler):
    cfg = TrainConfig(lr=0.1, optimizer="sgd", warmup_epochs=1.5, scheduler=scheduler, gamma=0.5, epochs=6)

    def build():
        optimizer = build_optimizer(_params(), cfg, scaled_lr(cfg, 2))
        return optimizer, build_scheduler(optimizer, cfg, steps_per_epoch=2)

    def run(optimizer, schedule, epochs):
        lrs = []
        for _ in range(epochs):
            for _ in range(2):
                optimizer.step()
                schedule.step_batch()
                lrs.append(schedule.current_lr())
            schedule.step_epoch(1.0)
        return lrs

    optimizer, schedule = build()
    run(optimizer, schedule, 1)
    buffer = io.BytesIO()
    torch.save({"optimizer": optimizer.state_dict(), "schedule": schedule.state_dict()}, buffer)
    expected = run(optimizer, schedule, 3)

    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    resumed_optimizer, resumed_schedule = build()
    resumed_optimizer.load_state_dict(saved["optimizer"])
    resumed_schedule.load_state_dict(saved["schedule"])
    assert run(resumed_optimizer, resumed_schedule, 3) == expected


def test_loading_a_schedule_saved_under_other_settings_is_refused():
    cfg = TrainConfig(lr=0.1, warmup_epochs=1.0, scheduler="step")
    saved = build_scheduler(build_optimizer(_params(), cfg, 0.2), cfg, steps_per_epoch=2).state_dict()
    plain = TrainConfig(lr=0.1, scheduler="step")
    schedule = build_scheduler(build_optimizer(_params(), plain, 0.2), plain, steps_per_epoch=2)
    with pytest.raises(
        SparkmlParError, match="saved learning-rate schedule has a warmup part but this run's config has none"
    ):
        schedule.load_state_dict(saved)
