"""Can the cluster hold N barrier tasks at once? Answered before launching, never by hanging.

Spark schedules a barrier stage only when all its tasks fit at once; otherwise it waits and retries
for minutes. The count comes from Spark's own scheduler (the same number its barrier check uses);
the explanation spells out the settings behind it so the user knows which one to change.
"""

from __future__ import annotations

import os
import re
import time

from sparkml_par.errors import SparkmlParError

_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]$")


def concurrent_task_slots(sc) -> int:
    jsc = sc._jsc.sc()
    return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))


def expected_slots(sc) -> int | None:
    """Slots the master URL promises once every executor has registered (None: not knowable up front)."""
    conf = sc.getConf()
    task_cpus = int(conf.get("spark.task.cpus", "1"))
    master = sc.master
    if match := _LOCAL.match(master):
        cores = match.group(1) or "1"
        return ((os.cpu_count() or 1) if cores == "*" else int(cores)) // task_cpus
    if match := _LOCAL_CLUSTER.match(master):
        return int(match.group(1)) * int(match.group(2)) // task_cpus
    if conf.get("spark.executor.instances") and conf.get("spark.executor.cores"):
        return int(conf.get("spark.executor.instances")) * int(conf.get("spark.executor.cores")) // task_cpus
    return None


def describe_slots(sc, slots: int) -> str:
    conf = sc.getConf()
    task_cpus = conf.get("spark.task.cpus", "1")
    master = sc.master
    if match := _LOCAL.match(master):
        cores = match.group(1) or "1"
        text = f"{master}: {cores} cores / spark.task.cpus={task_cpus}"
    elif match := _LOCAL_CLUSTER.match(master):
        text = f"{master}: {match.group(1)} executors × {match.group(2)} cores / spark.task.cpus={task_cpus}"
    else:
        executors = sc._jsc.sc().getExecutorIds().size()  # a Scala Seq
        text = (
            f"{executors} executors × spark.executor.cores={conf.get('spark.executor.cores', '?')}"
            f" / spark.task.cpus={task_cpus}"
        )
    gpu_task = conf.get("spark.task.resource.gpu.amount", None)
    if gpu_task:
        text += (
            f", GPUs: spark.executor.resource.gpu.amount="
            f"{conf.get('spark.executor.resource.gpu.amount', '?')} / spark.task.resource.gpu.amount={gpu_task}"
        )
    return f"{slots} task slots ({text})"


def check_gpu_resources(sc) -> None:
    """Raises a SparkmlParError, naming the setting, where Spark's resources cannot give every task a GPU.

    The task and executor amounts are read from the session; a discovery script is run here where the
    executors run on this machine (local-cluster), since a failing one leaves the cluster with no executor.
    """
    conf = sc.getConf()
    for key in ("spark.task.resource.gpu.amount", "spark.executor.resource.gpu.amount"):
        if not conf.get(key, None):
            raise SparkmlParError(
                f"spark.use_gpu is on but {key} is not set, so Spark assigns the tasks no GPU; set it (the "
                f"session sets both when spark.use_gpu starts it) or turn spark.use_gpu off"
            )
    script = conf.get("spark.worker.resource.gpu.discoveryScript", None) or conf.get(
        "spark.executor.resource.gpu.discoveryScript", None
    )
    if script and _LOCAL_CLUSTER.match(sc.master):
        check_discovery_script(script)


def check_discovery_script(script: str) -> None:
    """Runs a GPU discovery script as Spark would; a SparkmlParError unless it prints Spark's JSON."""
    import json
    import subprocess

    setting = "spark.executor.resource.gpu.discoveryScript"
    try:
        done = subprocess.run([script], capture_output=True, text=True, timeout=60)
        found = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        raise SparkmlParError(f"{setting}={script!r} does not run: {exc}; point it at an executable script") from None
    if not isinstance(found, dict) or found.get("name") != "gpu" or not found.get("addresses"):
        raise SparkmlParError(
            f"{setting}={script!r} printed {done.stdout.strip()[:200]!r} (exit code {done.returncode}, "
            f"{done.stderr.strip()[:200]!r}), not the JSON Spark needs: "
            f'{{"name": "gpu", "addresses": ["0", ...]}}'
        )


def check_barrier_launch(sc, num_proc: int, wait_seconds: float = 30.0, use_gpu: bool = False) -> int:
    """Raises a SparkmlParError unless num_proc barrier tasks (with a GPU each, for use_gpu) fit; returns the
    slot count."""
    if use_gpu:
        check_gpu_resources(sc)
    conf = sc.getConf()
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        raise SparkmlParError(
            "Spark refuses barrier stages while dynamic allocation is on "
            "(spark.dynamicAllocation.enabled=true); set spark.dynamicAllocation.enabled=false "
            "for the training job (spark.conf in the config)"
        )
    slots = concurrent_task_slots(sc)
    # Executors of a cluster register after the session starts: give them time to arrive.
    expected = expected_slots(sc)
    target = num_proc or expected or 1
    deadline = time.monotonic() + wait_seconds
    while slots < target and (expected is None or slots < expected) and time.monotonic() < deadline:
        time.sleep(0.25)
        slots = concurrent_task_slots(sc)
    if num_proc > slots:
        raise SparkmlParError(
            f"num_proc={num_proc} but the cluster has {describe_slots(sc, slots)}; "
            f"lower num_proc to {slots} or add cores (a bigger local[N], more executors or spark.executor.cores)"
            f" — a barrier stage needs all its tasks running at once"
        )
    if slots < 1:
        raise SparkmlParError(
            f"the cluster has no task slots yet ({describe_slots(sc, slots)}); check that executors started"
        )
    return slots
