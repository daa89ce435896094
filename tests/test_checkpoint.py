"""Atomic checkpoints, keep-K pruning, corrupted files, fingerprints and RNG state."""

from __future__ import annotations

import dataclasses
import logging
import random
import re

import numpy as np
import pytest
import torch

from sparkml_par.config import TrainConfig
from sparkml_par.errors import SparkmlParError
from sparkml_par.models import build_model, model_spec
from sparkml_par.train import checkpoint
from sparkml_par.train.checkpoint import (
    capture_rng_state,
    checkpoint_fingerprint,
    load_latest_checkpoint,
    restore_rng_state,
    write_checkpoint_atomically,
)

torch.set_num_threads(1)

SPEC = model_spec("mlp", {"hidden": [8]}, (4,), 3)
FINGERPRINT = checkpoint_fingerprint(SPEC, TrainConfig(), "data-1")


def _state(value: float = 0.0) -> dict:
    return {"fingerprint": FINGERPRINT, "model": {"weight": torch.full((2, 2), value)}, "step": int(value)}


def _names(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_training_state_round_trip(tmp_path):
    torch.manual_seed(0)
    model = build_model("mlp", {"hidden": [8]}, input_shape=(4,), num_outputs=3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()
    state = {
        "fingerprint": FINGERPRINT,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": capture_rng_state(),
        "metrics": {"val_loss": 0.5, "history": [1.0, 0.5]},
    }
    path = write_checkpoint_atomically(tmp_path, 3, state, keep=2)
    assert path == str(tmp_path / "checkpoint-00003.pt")
    loaded = load_latest_checkpoint(tmp_path, FINGERPRINT)
    assert loaded["epoch"] == 3 and loaded["metrics"] == state["metrics"]
    for key, tensor in model.state_dict().items():
        assert torch.equal(loaded["model"][key], tensor)
    restored = torch.optim.Adam(model.parameters(), lr=0.1)
    restored.load_state_dict(loaded["optimizer"])
    assert torch.equal(restored.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])
    assert restored.param_groups[0]["betas"] == (0.9, 0.999)


def test_no_checkpoint_gives_none(tmp_path):
    assert load_latest_checkpoint(tmp_path / "missing", FINGERPRINT) is None
    assert load_latest_checkpoint(tmp_path, FINGERPRINT) is None


def test_keeps_the_newest_k(tmp_path):
    for epoch in range(1, 6):
        write_checkpoint_atomically(tmp_path, epoch, _state(epoch), keep=2)
    assert _names(tmp_path) == ["checkpoint-00004.pt", "checkpoint-00005.pt"]
    assert load_latest_checkpoint(tmp_path, FINGERPRINT)["step"] == 5


def test_restarting_from_an_earlier_epoch_removes_later_checkpoints(tmp_path):
    for epoch in range(1, 4):
        write_checkpoint_atomically(tmp_path, epoch, _state(epoch), keep=5)
    write_checkpoint_atomically(tmp_path, 1, _state(10), keep=5)
    assert _names(tmp_path) == ["checkpoint-00001.pt"]
    assert load_latest_checkpoint(tmp_path, FINGERPRINT)["step"] == 10


def test_crashed_writes_are_ignored(tmp_path, caplog):
    write_checkpoint_atomically(tmp_path, 1, _state(1), keep=3)
    write_checkpoint_atomically(tmp_path, 2, _state(2), keep=3)
    # What a crash leaves: a temporary file of the next write, and a newer file cut short (a copy
    # interrupted by another tool; our own writes never leave one).
    (tmp_path / ".checkpoint-00003.abcd.tmp").write_bytes(b"partial")
    full = (tmp_path / "checkpoint-00002.pt").read_bytes()
    (tmp_path / "checkpoint-00004.pt").write_bytes(full[: len(full) // 2])
    with caplog.at_level(logging.WARNING, logger=checkpoint.__name__):
        loaded = load_latest_checkpoint(tmp_path, FINGERPRINT)
    assert loaded["epoch"] == 2
    assert len(caplog.records) == 1
    assert caplog.records[0].getMessage() == (
        f"skipping checkpoint {tmp_path / 'checkpoint-00004.pt'}: it cannot be read (RuntimeError: "
        f"PytorchStreamReader failed reading zip archive: failed finding central directory)"
    )
    # The next write cleans up the temporary file.
    write_checkpoint_atomically(tmp_path, 3, _state(3), keep=3)
    assert ".checkpoint-00003.abcd.tmp" not in _names(tmp_path)


def test_failure_during_write_leaves_previous_checkpoints(tmp_path, monkeypatch):
    write_checkpoint_atomically(tmp_path, 1, _state(1), keep=3)

    def save_half_then_fail(obj, handle):
        handle.write(b"PK\x03\x04 half of a zip")
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", save_half_then_fail)
    with pytest.raises(OSError, match="No space left"):
        write_checkpoint_atomically(tmp_path, 2, _state(2), keep=3)
    assert _names(tmp_path) == ["checkpoint-00001.pt"]
    monkeypatch.undo()
    assert load_latest_checkpoint(tmp_path, FINGERPRINT)["epoch"] == 1


def test_corrupted_files_are_skipped_with_a_warning_each(tmp_path, caplog):
    write_checkpoint_atomically(tmp_path, 1, _state(1), keep=5)
    (tmp_path / "checkpoint-00002.pt").write_bytes(b"\x00garbage")
    torch.save({"no": "fingerprint"}, tmp_path / "checkpoint-00003.pt")
    # A pickled numpy array would run numpy code on load; weights_only refuses it.
    torch.save({"fingerprint": FINGERPRINT, "array": np.zeros(3)}, tmp_path / "checkpoint-00004.pt")
    with caplog.at_level(logging.WARNING, logger=checkpoint.__name__):
        loaded = load_latest_checkpoint(tmp_path, FINGERPRINT)
    assert loaded["epoch"] == 1
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 3
    # numpy 2 moved numpy.core to numpy._core; the array pickles under its own numpy's name. torch 2.3 words
    # the refusal "Unsupported class", later versions "Unsupported global".
    reconstruct = re.escape(f"{np.zeros(0).__reduce__()[0].__module__}._reconstruct")
    assert re.fullmatch(
        re.escape(f"skipping checkpoint {tmp_path / 'checkpoint-00004.pt'}: it cannot be read (weights_only ")
        + rf"load refused it: Unsupported (global: GLOBAL {reconstruct} was not an allowed global by default"
        + rf"|class {reconstruct})\)",
        messages[0],
    )
    assert messages[1] == f"skipping checkpoint {tmp_path / 'checkpoint-00003.pt'}: it holds no checkpoint fingerprint"
    assert messages[2] == (
        f"skipping checkpoint {tmp_path / 'checkpoint-00002.pt'}: it cannot be read (weights_only "
        f"load refused it: Unsupported operand 0)"
    )


def test_checkpoint_of_another_model_is_refused(tmp_path):
    write_checkpoint_atomically(tmp_path, 1, _state(1), keep=1)
    other = checkpoint_fingerprint(model_spec("mlp", {"hidden": [16]}, (4,), 3), TrainConfig(optimizer="sgd"), "data-1")
    with pytest.raises(SparkmlParError) as err:
        load_latest_checkpoint(tmp_path, other)
    message = str(err.value)
    old_hash, new_hash = checkpoint._short_hash(FINGERPRINT), checkpoint._short_hash(other)
    assert old_hash != new_hash
    assert message == (
        f"checkpoint {tmp_path / 'checkpoint-00001.pt'} was written for fingerprint {old_hash} but this run has "
        f'fingerprint {new_hash} (model.args.hidden: [8] in the checkpoint, [16] now; optimizer: "adam" in the '
        f'checkpoint, "sgd" now); use a new train.output directory for a different model or config, or set '
        f"train.resume=never to start over in this one"
    )


def test_fingerprint_ignores_settings_a_resume_may_change():
    cfg = TrainConfig()
    assert checkpoint_fingerprint(SPEC, dataclasses.replace(cfg, epochs=50, lr=0.5), "data-1") == FINGERPRINT
    assert checkpoint_fingerprint(SPEC, dataclasses.replace(cfg, scheduler="cosine"), "data-1") != FINGERPRINT
    assert checkpoint_fingerprint(SPEC, cfg, "data-2") != FINGERPRINT


def test_state_that_weights_only_cannot_load_is_rejected_before_writing(tmp_path):
    state = dict(_state(), extra={"array": np.zeros(2)})
    with pytest.raises(TypeError, match=r"checkpoint state\['extra'\]\['array'\] is a numpy.ndarray"):
        write_checkpoint_atomically(tmp_path, 1, state, keep=1)
    with pytest.raises(TypeError, match=r"checkpoint state\['loss'\] is a numpy.float64"):
        write_checkpoint_atomically(tmp_path, 1, dict(_state(), loss=np.float64(1.0)), keep=1)
    with pytest.raises(ValueError, match="needs a 'fingerprint' entry"):
        write_checkpoint_atomically(tmp_path, 1, {"model": {}}, keep=1)
    assert _names(tmp_path) == []


def _draw() -> tuple:
    return torch.rand(3), np.random.rand(3), random.random(), random.gauss(0, 1)


def test_rng_state_round_trip_through_a_checkpoint(tmp_path):
    torch.manual_seed(7)
    np.random.seed(7)
    random.seed(7)
    random.gauss(0, 1)  # leaves a cached second gaussian in python's state
    np.random.standard_normal()  # and in numpy's
    write_checkpoint_atomically(tmp_path, 1, {"fingerprint": FINGERPRINT, "rng": capture_rng_state()}, keep=1)
    expected = _draw()
    _draw()
    restore_rng_state(load_latest_checkpoint(tmp_path, FINGERPRINT)["rng"])
    again = _draw()
    assert torch.equal(again[0], expected[0])
    assert np.array_equal(again[1], expected[1])
    assert again[2:] == expected[2:]
