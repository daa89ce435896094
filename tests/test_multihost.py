"""The pipeline on a Spark standalone cluster of simulated hosts (see simulated_cluster.py).

Each host is a network namespace with its own address and one 1-core worker; the hostname resolves to
127.0.0.1 on all, as on many real hosts. Two hosts' workers run from the start; the third host's worker
runs only in the elastic training test. The driver is `sparkml-par` in a subprocess, as a user runs it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from run_settings import outputs_under, tiny_job
from simulated_cluster import SimulatedCluster, unavailable_reason

from sparkml_par.train.loop import steps_per_epoch

pytestmark = [pytest.mark.slow, pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))]

ROOT = Path(__file__).parents[1]
CLI = str(Path(sys.executable).with_name("sparkml-par"))
TINY = [*tiny_job(rows=600, epochs=3), "train.model_args={hidden: [16]}"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = SimulatedCluster(tmp_path_factory.mktemp("cluster"), hosts=3, workers=2)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _sparkml_par(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env={**os.environ, **(env or {})}
    )


def _weights(root: Path) -> dict[str, torch.Tensor]:
    return torch.load(root / "model" / "model" / "weights.pt", weights_only=True)


def test_smoke_ranks_on_two_hosts(cluster):
    done = _sparkml_par("smoke", str(ROOT / "conf" / "quickstart.yaml"), *cluster.driver_settings(), "train.num_proc=2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "all-reduced sum over 2 Horovod ranks: [3.0, 3.0, 3.0, 3.0]" in done.stdout


@pytest.fixture(scope="module")
def spread(cluster, tmp_path_factory):
    """`sparkml-par run` of the quickstart config on small synthetic data, ranks on both hosts."""
    root = tmp_path_factory.mktemp("spread")
    done = _sparkml_par(
        "run", str(ROOT / "conf" / "quickstart.yaml"), *TINY, *outputs_under(root), *cluster.driver_settings()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return root, done


def test_run_across_two_hosts_equals_the_local_run(spread, tmp_path):
    root, done = spread
    assert "ranks on 2 hosts (10.213.37.11, 10.213.37.12)" in done.stderr
    local = _sparkml_par("run", str(ROOT / "conf" / "quickstart.yaml"), *TINY, *outputs_under(tmp_path / "local"))
    assert local.returncode == 0, local.stderr[-3000:]
    assert "ranks on 1 host (127.0.0.1)" in local.stderr
    accuracy = [line for line in done.stdout.splitlines() if line.startswith("test accuracy")]
    assert accuracy and accuracy == [line for line in local.stdout.splitlines() if line.startswith("test accuracy")]
    for name, tensor in _weights(tmp_path / "local").items():
        torch.testing.assert_close(_weights(root)[name], tensor, rtol=0, atol=1e-5)


def test_a_rank_killed_on_one_host_is_rerun_and_resumes(cluster, spread, tmp_path):
    """Rank 1 kills its own process once, at step 3 of epoch 2 (TINY's network, from injected_faults)."""
    plain, _ = spread
    rows = json.loads((plain / "dataset" / "_manifest.json").read_text())["splits"]["train"]["rows"]
    kill_at = steps_per_epoch(rows, 32, 1) + 3
    killed = _sparkml_par(
        "run",
        str(ROOT / "conf" / "quickstart.yaml"),
        *TINY,
        "train.model=injected_faults:killing_mlp",
        f"train.model_args={{hidden: [16], kill_rank: 1, kill_at_step: {kill_at}, "
        f"marker: '{tmp_path / 'killed-once'}'}}",
        *outputs_under(tmp_path / "killed"),
        *cluster.driver_settings(),
    )
    assert killed.returncode == 0, killed.stderr[-3000:]
    assert "Spark reruns the stage" in killed.stderr and (tmp_path / "killed-once").exists()
    epochs = [json.loads(line)["epoch"] for line in (tmp_path / "killed" / "model" / "metrics.jsonl").open()]
    assert epochs == [1, 2, 3]
    for name, tensor in _weights(plain).items():
        torch.testing.assert_close(_weights(tmp_path / "killed")[name], tensor, rtol=0, atol=1e-6)


def test_a_host_lost_mid_training_names_it_and_a_rerun_resumes(cluster, tmp_path):
    """Host 2's worker (and its executor) is killed once epoch 1 is checkpointed: the error names the host,
    the epoch and the newest checkpoint; with the host back, the same command resumes from it."""
    command = [
        "train",
        str(ROOT / "conf" / "quickstart.yaml"),
        *TINY,
        "data.synthetic.rows=4000",
        "train.epochs=12",
        *outputs_under(tmp_path),
        *cluster.driver_settings(),
    ]
    prepared = _sparkml_par("prepare", *command[1:])
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    metrics = tmp_path / "model" / "metrics.jsonl"
    training = subprocess.Popen([CLI, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    lost = cluster.members[1]
    try:
        deadline = time.monotonic() + 300
        while not (metrics.exists() and metrics.read_text().strip()) and training.poll() is None:
            assert time.monotonic() < deadline, "training wrote no epoch within 300 s"
            time.sleep(0.1)
        cluster.stop_worker(lost)
        _, stderr = training.communicate(timeout=300)
    finally:
        training.kill()
        cluster.start_worker(lost)
        cluster.wait_for_workers(2)
    assert training.returncode == 2, stderr[-3000:]
    assert f"on host {lost.address} died without raising an error" in stderr
    assert "fewer than the ranks (host 10.213.37.12 left it?)" in stderr
    assert "the newest checkpoint is" in stderr and "`sparkml-par train` with the same config resumes from it" in stderr
    done_before = len(metrics.read_text().splitlines())
    resumed = _sparkml_par(*command)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from checkpoint epoch" in resumed.stderr
    epochs = [json.loads(line)["epoch"] for line in metrics.open()]
    assert epochs == list(range(1, 13)) and done_before < 12


def test_horovod_re_init_and_process_sets_inside_a_rank(cluster, tmp_path):
    script = tmp_path / "reinit.py"
    script.write_text(REINIT_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), *cluster.driver_settings()], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [
        {"rank": 0, "after_reinit": 3.0, "process_set": 1.0},
        {"rank": 1, "after_reinit": 3.0, "process_set": None},
    ]


def test_a_lost_worker_fails_the_slot_check_with_its_arithmetic(cluster, tmp_path):
    lost = cluster.members[1]
    cluster.stop_worker(lost)
    try:
        started = time.monotonic()
        done = _sparkml_par(
            "smoke", str(ROOT / "conf" / "quickstart.yaml"), *cluster.driver_settings(), "train.num_proc=2", timeout=300
        )
        assert done.returncode == 2, done.stderr[-3000:]
        assert (
            "error: num_proc=2 but the cluster has 1 task slots (1 executors × spark.executor.cores=1 / "
            "spark.task.cpus=1)" in done.stderr
        )
        assert time.monotonic() - started < 180
    finally:
        cluster.start_worker(lost)
        cluster.wait_for_workers(2)


REINIT_SCRIPT = """
import json, sys
from sparkml_par import launch
from sparkml_par.config import load_config
from sparkml_par.spark_runtime.session import spark_session


def reinit():
    import horovod.torch as hvd
    import torch

    hvd.shutdown()
    hvd.init()
    after = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
    only_rank0 = hvd.add_process_set([0])
    in_set = (hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, process_set=only_rank0).item()
              if hvd.rank() == 0 else None)
    hvd.remove_process_set(only_rank0)
    return {"rank": hvd.rank(), "after_reinit": after, "process_set": in_set}


cfg = load_config("conf/quickstart.yaml", sys.argv[1:])
with spark_session(cfg.spark) as spark:
    # Horovod's own switch for process sets made after hvd.init(), as its test suite sets it.
    print(json.dumps(launch.Launcher(num_proc=2, spark=spark, timeout=240,
                                     env={"HOROVOD_DYNAMIC_PROCESS_SETS": "1"}).run(reinit)))
"""


def test_a_host_lost_mid_epoch_training_goes_on_with_fewer_ranks_and_grows_back(cluster, tmp_path):
    """num_proc=3, min_proc=2 on three hosts: host 3's worker is killed in epoch 2 of 6, once a step
    checkpoint of that epoch is on disk. Training goes on with 2 ranks from the newest step checkpoint, goes
    back to 3 when the worker is back, and ends as a run without the interruptions does: every global batch
    holds the same rows on 2 ranks as on 3, so only the order of floating-point sums differs."""
    third = cluster.members[2]
    cluster.start_worker(third)
    cluster.wait_for_workers(3)
    rows, batch = 20000, 30
    common = [
        str(ROOT / "conf" / "quickstart.yaml"),
        *TINY,
        f"data.synthetic.rows={rows}",
        "data.max_shards=6",
        "train.epochs=6",
        f"train.batch_size={batch}",
        "train.num_proc=3",
        "train.checkpoint_every_steps=5",
        *outputs_under(tmp_path),
    ]
    prepared = _sparkml_par("prepare", *common, *cluster.driver_settings())
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    log = tmp_path / "train.log"
    checkpoints = tmp_path / "model" / "checkpoints"
    with open(log, "w") as output:
        training = subprocess.Popen(
            [CLI, "train", *common, "train.min_proc=2", *cluster.driver_settings()],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    try:
        _wait_for(lambda: any(checkpoints.glob("checkpoint-00001-*.pt")), training, log, "a step checkpoint of epoch 2")
        cluster.stop_worker(third)
        _wait_for(lambda: "training again on 2 ranks" in log.read_text(), training, log, "training on 2 ranks")
        cluster.start_worker(third)
        training.wait(timeout=600)
    finally:
        training.kill()
        cluster.stop_worker(third)
    text = log.read_text()
    assert training.returncode == 0, text[-3000:]
    assert "training goes on with 2 ranks instead of 3 (train.min_proc=2)" in text
    metrics = [json.loads(line) for line in (tmp_path / "model" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in metrics] == [1, 2, 3, 4, 5, 6]
    train_rows = json.loads((tmp_path / "dataset" / "_manifest.json").read_text())["splits"]["train"]["rows"]
    assert [r["samples"] for r in metrics] == [steps_per_epoch(train_rows, batch, 1) * batch] * 6
    lost, grown = [event for r in metrics for event in r.get("interruptions", [])]
    assert (lost["reason"], lost["epoch"], lost["ranks_before"], lost["ranks_after"]) == ("lost", 2, 3, 2)
    assert 0 <= lost["steps_repeated"] <= 5
    assert (grown["reason"], grown["ranks_before"], grown["ranks_after"], grown["steps_repeated"]) == ("grow", 2, 3, 0)
    assert metrics[-1]["ranks"] == 3
    assert re.search(r"lost +epoch 2: 3 -> 2 ranks, [0-5] steps repeated, training again [0-9.]+ s after", text)

    # The same epochs without interruptions: 3 ranks as local processes, on the same dataset.
    plain = _sparkml_par("train", *common, "train.launcher=local", f"train.output={tmp_path}/plain")
    assert plain.returncode == 0, plain.stderr[-3000:]
    plain_metrics = [json.loads(line) for line in (tmp_path / "plain" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["val_accuracy"] == pytest.approx(plain_metrics[-1]["val_accuracy"], abs=0.002)
    for name, tensor in torch.load(tmp_path / "plain" / "model" / "weights.pt", weights_only=True).items():
        torch.testing.assert_close(_weights(tmp_path)[name], tensor, rtol=0, atol=1e-5)


def _wait_for(condition, process: subprocess.Popen, log: Path, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"training ended before {what}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.05)
