"""Launch scenarios that need a SparkSession of their own (another master, fake GPUs, other settings).

Run as `python tests/scripts/launch_scenarios.py NAME [ARG ...]`; the last stdout line is the outcome as JSON.
"""

import json
import os
import sys
import tempfile

from sparkml_par import launch
from sparkml_par.config import SparkConfig
from sparkml_par.errors import SparkmlParError
from sparkml_par.spark_runtime.session import get_or_create_session


def describe_rank():
    import horovod.torch as hvd
    import torch

    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    return {
        "rank": hvd.rank(),
        "size": hvd.size(),
        "local_rank": hvd.local_rank(),
        "cross_rank": hvd.cross_rank(),
        "sum": total.item(),
        "pid": os.getpid(),
        "planned_rank": int(os.environ["HOROVOD_RANK"]),
        "iface": os.environ["HOROVOD_GLOO_IFACE"],
    }


def gpu_binding():
    import horovod.torch as hvd

    return {
        "rank": hvd.rank(),
        "local_rank": hvd.local_rank(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "assigned": list(launch.current_rank().gpu_addresses),
        "devices": list(launch.current_rank().gpu_devices),
    }


def local_cluster():
    get_or_create_session(SparkConfig(master="local-cluster[2,1,1024]"))
    return launch.Launcher(num_proc=2).run(describe_rank)


def fake_gpus(count: str):
    """One executor with `count` GPUs (a fake discovery script) and a rank on each."""
    gpus = int(count)
    script = os.path.join(tempfile.mkdtemp(), "gpus.sh")
    with open(script, "w") as f:
        addresses = json.dumps({"name": "gpu", "addresses": [str(i) for i in range(gpus)]})
        f.write(f"#!/bin/sh\necho '{addresses}'\n")
    os.chmod(script, 0o755)
    get_or_create_session(
        SparkConfig(
            master=f"local-cluster[1,{gpus},1024]", use_gpu=True, gpus_per_executor=gpus, gpu_discovery_script=script
        )
    )
    return launch.Launcher(num_proc=gpus, use_gpu=True).run(gpu_binding)


def dynamic_allocation():
    get_or_create_session(SparkConfig(master="local[2]", conf={"spark.dynamicAllocation.enabled": "true"}))
    try:
        launch.Launcher(num_proc=2).run(describe_rank)
    except SparkmlParError as exc:
        return {"error": str(exc)}
    return {"error": None}


if __name__ == "__main__":
    from pyspark.sql import SparkSession

    outcome = globals()[sys.argv[1]](*sys.argv[2:])
    SparkSession.getActiveSession().stop()
    print(json.dumps(outcome))
