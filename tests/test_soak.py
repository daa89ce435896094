"""Back-to-back barrier launches in one SparkSession leak nothing, and the rendezvous is never on all interfaces.

A session lives for a whole notebook, tuning study or pipeline: whatever one launch leaves behind (a
process, a thread, a listening socket, a temporary file) piles up with every launch that follows.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
from injected_faults import stall_rank_one_before_the_rendezvous

from sparkml_par import launch

LAUNCHES = 10
# The temporary directory is shared with other jobs on the machine, so only names a launch could create
# are counted there: Horovod's, Gloo's, the project's and multiprocessing's (the launcher and Horovod's
# Python and native code use no tempfile names of their own). This session's own PySpark temporary
# directory, where every launch writes its partition data, is counted in full.
TEMP_PREFIXES = ("horovod", "gloo", "sparkml_par", "pymp-")
WILDCARDS = ("0.0.0.0", "::", "")


def _tcp_connections(process: psutil.Process) -> list:
    # psutil 6 renamed Process.connections (psutil 5.9 on the Databricks runtimes) to net_connections.
    if hasattr(process, "net_connections"):
        return process.net_connections(kind="tcp")
    return process.connections(kind="tcp")


def _listening(process: psutil.Process) -> set[tuple[int, str, int]]:
    try:
        return {
            (process.pid, c.laddr.ip, c.laddr.port) for c in _tcp_connections(process) if c.status == psutil.CONN_LISTEN
        }
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return set()


def allreduce_and_look_around(driver_pid: int):
    """Rank function: an all-reduce, and the sockets its own process and its ancestors up to the driver
    (the Spark worker daemon, the JVM) listen on while Horovod runs."""
    import horovod.torch as hvd
    import torch

    me = psutil.Process()
    ancestors = me.parents()
    upto = next(i for i, p in enumerate(ancestors) if p.pid == driver_pid)
    listening = set().union(*[_listening(p) for p in [me, *ancestors[: upto + 1]]])
    return {
        "rank": hvd.rank(),
        "pid": me.pid,
        "sum": hvd.allreduce(torch.full((3,), hvd.rank() + 1.0), op=hvd.Sum).tolist(),
        "rendezvous": (os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"], int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"])),
        "listening": sorted(listening),
    }


def _spark_worker_processes() -> list[psutil.Process]:
    """Spark's Python daemon and workers: the processes the ranks run in (everything below the JVM)."""
    workers = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.name() != "java":
                workers.append(p)
        except psutil.NoSuchProcess:
            pass
    return workers


def _temp_entries(sc) -> set[str]:
    root = Path(tempfile.gettempdir())
    entries = {p.name for p in root.iterdir() if p.name.startswith(TEMP_PREFIXES)}
    session_dirs = [Path(sc._temp_dir), Path(sc._jvm.org.apache.spark.SparkFiles.getRootDirectory())]
    for directory in session_dirs:
        entries |= {str(p) for p in directory.rglob("*")}
    return entries


def _snapshot(sc) -> dict[str, set]:
    """What a launch could leak, in the driver and in every process below it (JVM, daemon, workers)."""
    me = psutil.Process()
    descendants = me.children(recursive=True)
    native_threads = set()
    for p in _spark_worker_processes():
        try:
            native_threads.add((p.pid, p.num_threads()))
        except psutil.NoSuchProcess:
            pass
    return {
        "processes": {(p.pid, p.name()) for p in descendants},
        "driver threads": {(t.name, t.ident) for t in threading.enumerate()},
        "native threads of Spark's Python workers": native_threads,
        "listening TCP sockets": set().union(*[_listening(p) for p in [me, *descendants]]),
        "temporary files": _temp_entries(sc),
    }


def _added_since(sc, baseline: dict[str, set], settle_seconds: float = 10.0) -> dict[str, set]:
    """What is there now and was not in baseline, given a few seconds for tasks and sockets to wind down.

    Things that disappear are not leaks: Spark reaps idle Python workers, and threads or workers left
    by earlier tests may end at any time.
    """
    deadline = time.monotonic() + settle_seconds
    while True:
        now = _snapshot(sc)
        added = {kind: now[kind] - baseline[kind] for kind in baseline if now[kind] - baseline[kind]}
        if not added or time.monotonic() > deadline:
            return added
        time.sleep(0.5)


def test_ten_launches_leak_no_process_thread_socket_or_temporary_file(spark):
    """Measured after one warm-up launch (Spark starts its Python daemon and workers, and reuses them),
    nothing is added by the next ten; the sockets each launch opened (the driver's channel, Gloo's) are
    closed, and the rendezvous, up on rank 0's task address while the rank function runs, is closed with it."""
    sc = spark.sparkContext
    rank0_address = sc.getConf().get("spark.driver.host")  # local[N]: tasks run at the driver's address
    launch.Launcher(num_proc=2, spark=spark).run(allreduce_and_look_around, os.getpid())
    baseline = _snapshot(sc)
    assert baseline["processes"] and baseline["listening TCP sockets"]

    opened_during_launches = set()
    for _ in range(LAUNCHES):
        results = launch.Launcher(num_proc=2, spark=spark).run(allreduce_and_look_around, os.getpid())
        assert [r["rank"] for r in results] == [0, 1] and all(r["sum"] == [3.0, 3.0, 3.0] for r in results)
        assert {r["rendezvous"][0] for r in results} == {rank0_address}
        rank0 = results[0]
        assert (rank0["pid"], rank0_address, rank0["rendezvous"][1]) in set(map(tuple, rank0["listening"]))
        rank_sockets = {s for r in results for s in r["listening"] if s[0] == r["pid"]}
        assert {ip for _, ip, _ in rank_sockets} <= {rank0_address}
        opened_during_launches |= set().union(*[map(tuple, r["listening"]) for r in results])
    opened_during_launches -= baseline["listening TCP sockets"]
    assert any(pid == os.getpid() for pid, _, _ in opened_during_launches), "the driver's channel was not seen"

    assert _added_since(sc, baseline) == {}


def test_rendezvous_listens_on_the_rank0_task_address_only(spark):
    """Rank 1 holds back before joining, so rank 0 waits in hvd.init with the rendezvous open: every socket
    the rank processes listen on meanwhile (the rendezvous and Gloo's) is on rank 0's task address, none on
    all interfaces. The launch then fails on the rendezvous timeout, as it must."""
    sc = spark.sparkContext
    rank0_address = sc.getConf().get("spark.driver.host")
    before = set().union(*[_listening(p) for p in _spark_worker_processes()])
    seen: set[tuple[int, str, int]] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for p in _spark_worker_processes():
                seen.update(_listening(p))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, name="listening-socket-watch", daemon=True)
    watcher.start()
    try:
        with pytest.raises(launch.LaunchError, match=r"ranks \[1\] of 2 did not reach the Horovod rendezvous"):
            launch.Launcher(
                num_proc=2, spark=spark, timeout=30, rendezvous_timeout=5, setup=stall_rank_one_before_the_rendezvous
            ).run(allreduce_and_look_around, os.getpid())
    finally:
        stop.set()
        watcher.join()
    opened = seen - before
    assert opened, "no rank process was seen listening while rank 0 waited in the rendezvous"
    assert {ip for _, ip, _ in opened} == {rank0_address}
    assert not {ip for _, ip, _ in opened} & set(WILDCARDS)
