"""Writes cut short by SIGKILL leave the previous dataset or checkpoint valid; a broken reader fails fast."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_prep.job import prepare
from sparkml_par.config import load_config
from sparkml_par.launch import LaunchError
from sparkml_par.train.job import train

SPARKML_PAR = str(Path(sys.executable).parent / "sparkml-par")


def _wait_for(condition, process: subprocess.Popen, what: str, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, f"the process ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {seconds} s"
        time.sleep(0.02)


def _manifest(path: Path) -> dict:
    return json.loads((path / "_manifest.json").read_text())


def test_prepare_killed_while_writing_keeps_the_previous_dataset(spark, tmp_path):
    from petastorm import make_reader

    output = tmp_path / "dataset"
    settings = ["data.source=synthetic", "data.synthetic.features=8", "data.max_shards=2", f"data.output={output}"]
    prepare(spark, load_config(None, [*settings, "data.synthetic.rows=500"]).data)
    before = _manifest(output)

    conf = tmp_path / "conf.yaml"
    conf.write_text("data:\n  mode: overwrite\n")
    bigger = [*settings, "data.synthetic.rows=60000"]
    killed = subprocess.Popen(
        [SPARKML_PAR, "prepare", str(conf), *bigger],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_for(
        lambda: any(p.suffix == ".parquet" for p in tmp_path.glob("dataset.tmp-*/train/part-*")),
        killed,
        "a file written in the staging directory",
    )
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()

    assert _manifest(output) == before
    with make_reader(f"file://{output}/train", reader_pool_type="dummy", num_epochs=1) as reader:
        assert sum(1 for _ in reader) == before["splits"]["train"]["rows"]

    again = prepare(spark, load_config(conf, bigger).data)
    assert not again.skipped and again.manifest["rows_in"] == 60000
    assert _manifest(output)["fingerprint"] != before["fingerprint"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf.yaml", "dataset"]


CHECKPOINT_WRITER = """
import sys, torch
from sparkml_par.train.checkpoint import write_checkpoint_atomically
directory, epoch, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
state = {"fingerprint": {"model": "m"}, "epoch": epoch, "model": {"w": torch.ones(size)}}
write_checkpoint_atomically(directory, epoch, state, keep=3)
"""


def test_checkpoint_write_killed_mid_file_leaves_the_previous_checkpoint(tmp_path):
    from sparkml_par.train.checkpoint import load_latest_checkpoint, write_checkpoint_atomically

    subprocess.run([sys.executable, "-c", CHECKPOINT_WRITER, str(tmp_path), "1", "10"], check=True)
    writer = subprocess.Popen([sys.executable, "-c", CHECKPOINT_WRITER, str(tmp_path), "2", str(100_000_000)])
    _wait_for(
        lambda: any(p.stat().st_size > 0 for p in tmp_path.glob(".checkpoint-00002.tmp-*.pt")),
        writer,
        "a partial checkpoint file",
    )
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert [p.name for p in tmp_path.glob("checkpoint-*.pt")] == ["checkpoint-00001.pt"]
    assert load_latest_checkpoint(tmp_path, {"model": "m"})["epoch"] == 1
    write_checkpoint_atomically(tmp_path, 2, {"fingerprint": {"model": "m"}, "epoch": 2}, keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-00001.pt", "checkpoint-00002.pt"]


def test_a_shard_that_cannot_be_read_fails_training_within_seconds(spark, tmp_path):
    """The loader's worker hits a truncated file: the rank's error reaches the driver, nothing waits."""
    cfg = load_config(
        None,
        [
            "data.source=synthetic",
            "data.synthetic.rows=1200",
            "data.synthetic.features=8",
            "data.max_shards=2",
            f"data.output={tmp_path}/dataset",
            f"train.output={tmp_path}/model",
            "train.model=mlp",
            "train.epochs=2",
            "train.num_proc=2",
            "train.step_timeout=120",
        ],
    )
    manifest = prepare(spark, cfg.data).manifest
    broken = tmp_path / "dataset" / "train" / sorted(manifest["splits"]["train"]["files"])[-1]
    broken.write_bytes(broken.read_bytes()[:200])
    started = time.monotonic()
    with pytest.raises(
        LaunchError,
        match=r"training failed in epoch 1 of 2; no checkpoint was written .*\n"
        r"rank 1 on host \S+ failed: ",
    ) as failure:
        train(spark, cfg)
    assert time.monotonic() - started < 60
    assert "Parquet" in str(failure.value) or "parquet" in str(failure.value)
