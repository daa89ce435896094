"""GPU binding without a GPU: the device each Spark GPU address is, local ranks in GPU order, and GPU
settings checked before a launch."""

from __future__ import annotations

import pytest

from sparkml_par.errors import SparkmlParError
from sparkml_par.launch.gpus import device_index
from sparkml_par.launch.rank_plan import build_rank_plan
from sparkml_par.launch.slots import check_discovery_script


@pytest.mark.parametrize(
    "address, visible, index",
    [
        ("3", None, 3),  # every GPU of the host visible: nvidia-smi's index is the device index
        ("3", "", 3),
        ("2", "2,3", 0),  # an executor a cluster manager limited to GPUs 2 and 3
        ("3", "2, 3", 1),
        ("GPU-5e1a", "GPU-77c0,GPU-5e1a", 1),  # addresses given as UUIDs, as some discovery scripts print them
    ],
)
def test_a_spark_gpu_address_is_its_device_index_in_the_process(address, visible, index):
    assert device_index(address, visible) == index


def test_an_address_outside_the_visible_devices_names_the_discovery_script():
    with pytest.raises(SparkmlParError, match=r"GPU address '1', which is not one of this executor's CUDA_VISIBLE"):
        device_index("1", "2,3")
    with pytest.raises(SparkmlParError, match=r"'GPU-5e1a', which is not a device index"):
        device_index("GPU-5e1a", None)


def test_local_ranks_follow_the_gpu_addresses_on_each_host():
    # Spark handed host a's tasks GPUs 3, 1, 0, 2 in partition order, and host b's 1, 0.
    hosts = ["a", "a", "b", "a", "a", "b"]
    gpus = [("3",), ("1",), ("1",), ("0",), ("2",), ("0",)]
    plan = build_rank_plan(hosts, gpus)
    assert [s.task for s in plan] == [0, 1, 2, 3, 4, 5]
    local = {(s.host, gpus[s.task][0]): s.local_rank for s in plan}
    assert local == {("a", "0"): 0, ("a", "1"): 1, ("a", "2"): 2, ("a", "3"): 3, ("b", "0"): 0, ("b", "1"): 1}
    assert sorted(s.rank for s in plan) == list(range(6))
    assert all(s.local_size == (4 if s.host == "a" else 2) for s in plan)


def test_without_gpus_local_ranks_follow_the_partitions():
    assert [s.local_rank for s in build_rank_plan(["a", "a", "a"])] == [0, 1, 2]


@pytest.mark.parametrize(
    "body, message",
    [
        ("exit 3", r"printed '' \(exit code 3"),
        (
            'echo \'{"name": "gpu", "addresses": []}\'',
            r"printed .*addresses.*\[\]\}' \(exit code 0, ''\), not the JSON Spark needs",
        ),
        ("echo not json", r"does not run: Expecting value"),
    ],
)
def test_a_discovery_script_that_gives_no_gpu_is_named(tmp_path, body, message):
    script = tmp_path / "gpus.sh"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    with pytest.raises(SparkmlParError, match=rf"spark.executor.resource.gpu.discoveryScript='{script}' {message}"):
        check_discovery_script(str(script))


def test_a_discovery_script_that_is_not_there_is_named(tmp_path):
    with pytest.raises(SparkmlParError, match=r"discoveryScript='/nonexistent/gpus.sh' does not run"):
        check_discovery_script("/nonexistent/gpus.sh")


def test_a_working_discovery_script_passes(tmp_path):
    script = tmp_path / "gpus.sh"
    script.write_text('#!/bin/sh\necho \'{"name": "gpu", "addresses": ["0", "1"]}\'\n')
    script.chmod(0o755)
    check_discovery_script(str(script))
