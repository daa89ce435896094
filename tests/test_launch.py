"""The barrier launcher with real Spark barrier stages and real Horovod ranks."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from injected_faults import stall_rank_one_before_the_rendezvous

from sparkml_par import launch
from sparkml_par.errors import SparkmlParError
from sparkml_par.launch.rank_plan import build_rank_plan

SCENARIOS = Path(__file__).parent / "scripts" / "launch_scenarios.py"


def collectives():
    """Each collective with inputs whose exact result is known."""
    import horovod.torch as hvd
    import torch

    rank, size = hvd.rank(), hvd.size()
    mine = torch.arange(4, dtype=torch.float64) + 10 * rank
    return {
        "rank": rank,
        "size": size,
        "local_rank": hvd.local_rank(),
        "local_size": hvd.local_size(),
        "cross_rank": hvd.cross_rank(),
        "cross_size": hvd.cross_size(),
        "planned": [
            int(os.environ[k])
            for k in (
                "HOROVOD_RANK",
                "HOROVOD_SIZE",
                "HOROVOD_LOCAL_RANK",
                "HOROVOD_LOCAL_SIZE",
                "HOROVOD_CROSS_RANK",
                "HOROVOD_CROSS_SIZE",
            )
        ],
        "sum": hvd.allreduce(mine, op=hvd.Sum).tolist(),
        "average": hvd.allreduce(mine, op=hvd.Average).tolist(),
        "allgather": hvd.allgather(torch.full((rank + 1,), float(rank))).tolist(),
        "broadcast": hvd.broadcast(torch.full((3,), float(rank + 7)), root_rank=1).tolist(),
    }


def fail_on_rank_one(calls: str):
    import horovod.torch as hvd

    Path(calls, f"rank{hvd.rank()}-{os.getpid()}-{time.monotonic_ns()}").touch()
    if hvd.rank() == 1:
        raise ValueError("boom from rank 1")
    # Rank 0 waits in a collective rank 1 never joins: the launcher must stop it.
    import torch

    hvd.allreduce(torch.ones(1))
    return "unreachable"


def talk_and_report():
    import horovod.torch as hvd

    print(f"line from rank {hvd.rank()}")
    launch.current_rank().report({"epoch": 1, "rank_seen": hvd.rank()})
    return hvd.rank()


def stall_on_rank_one():
    """Both ranks heartbeat; rank 1 then stops making progress without raising."""
    import horovod.torch as hvd

    context = launch.current_rank()
    for _ in range(3):
        context.heartbeat()
        time.sleep(1.0)
    if hvd.rank() == 1:
        time.sleep(120)
    for _ in range(120):
        context.heartbeat()
        time.sleep(0.5)
    return "unreachable"


def die_on_rank_one_in_step_three():
    """Rank 1's process is killed outright (SIGKILL: no exception, no last words) in its fourth step."""
    import signal

    import horovod.torch as hvd
    import torch

    for step in range(20):
        launch.current_rank().report({"epoch": step})
        if hvd.rank() == 1 and step == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        hvd.allreduce(torch.ones(1000), name=f"step{step}")
        time.sleep(0.2)
    return "unreachable"


def idle_between_two_allreduces(seconds: float):
    """Counts the process's context switches while its rank sits idle between two all-reduces; rank 1 comes
    to the second one late, so rank 0 waits in it for a rank whose Horovod thread was idle."""
    import horovod.torch as hvd
    import torch

    def switches() -> int:
        fields = ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
        return sum(
            int(line.split()[1])
            for task in Path("/proc/self/task").iterdir()
            for line in (task / "status").read_text().splitlines()
            if line.startswith(fields)
        )

    hvd.allreduce(torch.ones(1), name="before_idle")
    before = switches()
    time.sleep(seconds)
    idle = switches() - before
    if hvd.rank() == 1:
        time.sleep(0.5)
    total = hvd.allreduce(torch.ones(2) * (hvd.rank() + 1), op=hvd.Sum, name="after_idle").tolist()
    return {"switches": idle, "sum": total}


def _check_collectives(results):
    assert [r["rank"] for r in results] == [0, 1]
    for r in results:
        assert [r["rank"], r["size"], r["local_rank"], r["local_size"], r["cross_rank"], r["cross_size"]] == r[
            "planned"
        ]
        assert r["sum"] == [10.0, 12.0, 14.0, 16.0]
        assert r["average"] == [5.0, 6.0, 7.0, 8.0]
        assert r["allgather"] == [0.0, 1.0, 1.0]
        assert r["broadcast"] == [8.0, 8.0, 8.0]


def test_rank_plan_groups_ranks_by_host_like_horovod():
    from horovod.runner.common.util.hosts import HostInfo, get_host_assignments

    hosts = ["b", "a", "b", "a", "b"]
    plan = build_rank_plan(hosts)
    assert [s.task for s in plan] == [0, 1, 2, 3, 4]
    assert [s.host for s in plan] == hosts
    theirs = get_host_assignments([HostInfo("b", 3), HostInfo("a", 2)], 5)
    ours = sorted(plan, key=lambda s: s.rank)
    assert [(s.host, s.rank, s.local_rank, s.local_size, s.cross_rank, s.cross_size) for s in ours] == [
        (t.hostname, t.rank, t.local_rank, t.local_size, t.cross_rank, t.cross_size) for t in theirs
    ]


def test_two_ranks_on_local_barrier_stage(spark):
    _check_collectives(launch.Launcher(num_proc=2).run(collectives))


def test_two_ranks_as_local_processes():
    _check_collectives(launch.Launcher(num_proc=2, mode="local").run(collectives))


def test_an_idle_rank_waits_for_work_instead_of_cycling(spark):
    # Horovod's background thread runs a cycle, a collective with every other rank, each HOROVOD_CYCLE_TIME
    # (1 ms); the build's patch makes a rank with nothing queued wait for its next request instead. Unpatched,
    # two idle ranks switched context ~9,000 times in 2 s each; patched, ~600 (the process's other threads).
    results = launch.Launcher(num_proc=2).run(idle_between_two_allreduces, 2.0)
    assert [r["sum"] for r in results] == [[3.0, 3.0], [3.0, 3.0]]
    assert all(r["switches"] < 2000 for r in results), results


def test_rank_failure_names_rank_and_traceback_without_hanging(spark, tmp_path):
    """An exception raised by the rank's code would only repeat: it is not retried."""
    started = time.monotonic()
    with pytest.raises(launch.LaunchError) as info:
        launch.Launcher(num_proc=2, rendezvous_timeout=60).run(fail_on_rank_one, str(tmp_path))
    elapsed = time.monotonic() - started
    assert sorted(p.name.split("-")[0] for p in tmp_path.iterdir()) == ["rank0", "rank1"]
    assert info.value.rank == 1
    assert str(info.value).startswith("rank 1 on host 127.0.0.1 failed: ValueError: boom from rank 1")
    assert "in fail_on_rank_one" in info.value.remote_traceback
    assert elapsed < 30
    # The stage was torn down: the session runs the next launch normally.
    _check_collectives(launch.Launcher(num_proc=2).run(collectives))


def test_too_many_ranks_fails_at_once_with_slot_arithmetic(spark):
    started = time.monotonic()
    with pytest.raises(
        SparkmlParError,
        match=r"num_proc=3 but the cluster has 2 task slots "
        r"\(local\[2\]: 2 cores / spark.task.cpus=1\); lower num_proc to 2",
    ):
        launch.Launcher(num_proc=3).run(collectives)
    assert time.monotonic() - started < 5


def test_rendezvous_timeout_names_the_missing_rank(spark):
    with pytest.raises(
        launch.LaunchError,
        match=r"ranks \[1\] of 2 did not reach the Horovod rendezvous "
        r"within 6 s; ranks \[0\] were waiting for them",
    ):
        launch.Launcher(num_proc=2, rendezvous_timeout=6, setup=stall_rank_one_before_the_rendezvous).run(collectives)


def test_a_killed_rank_is_named_not_the_peer_that_lost_it(spark):
    with pytest.raises(
        launch.LaunchError,
        match=r"^rank 1 on host 127.0.0.1 died without raising an error \(its "
        r"process exited: killed, out of memory, or a crash in native "
        r"code\) after its last progress record \{'epoch': 3\}",
    ) as info:
        launch.Launcher(num_proc=2).run(die_on_rank_one_in_step_three)
    assert info.value.rank == 1
    _check_collectives(launch.Launcher(num_proc=2).run(collectives))


def die_once_on_rank_one(marker: str):
    """Rank 1 is SIGKILLed in the first attempt only; every attempt's ranks leave a file behind."""
    import horovod.torch as hvd
    import torch

    Path(marker + f".rank{hvd.rank()}-{os.getpid()}-{time.monotonic_ns()}").touch()
    if hvd.rank() == 1 and not Path(marker).exists():
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return hvd.allreduce(torch.ones(2) * (hvd.rank() + 1), op=hvd.Sum).tolist()


def test_spark_reruns_the_stage_when_a_rank_process_dies(spark, tmp_path, caplog):
    with caplog.at_level("WARNING", logger="sparkml_par.launch"):
        results = launch.Launcher(num_proc=2).run(die_once_on_rank_one, str(tmp_path / "killed"))
    assert results == [[3.0, 3.0], [3.0, 3.0]]
    assert "attempt 1 of 4: rank 1 on host 127.0.0.1 died without raising an error" in caplog.text
    calls = sorted(p.name.split(".")[1].split("-")[0] for p in tmp_path.glob("killed.rank*"))
    assert calls == ["rank0", "rank0", "rank1", "rank1"]


def test_a_stalled_rank_is_named_instead_of_hanging(spark):
    started = time.monotonic()
    with pytest.raises(
        launch.LaunchError,
        match=r"ranks \[1\] made no progress for 4 s \(no step, log or "
        r"heartbeat\); the stage was cancelled",
    ) as info:
        launch.Launcher(num_proc=2, progress_timeout=4).run(stall_on_rank_one)
    assert info.value.rank == 1
    assert time.monotonic() - started < 40
    _check_collectives(launch.Launcher(num_proc=2).run(collectives))


def test_rank_output_and_progress_reach_the_driver(spark, caplog):
    records = []
    with caplog.at_level(logging.INFO, logger="sparkml_par.rank"):
        launcher = launch.Launcher(num_proc=2, on_progress=lambda rank, rec: records.append((rank, rec)))
        ranks = launcher.run(talk_and_report)
    assert ranks == [0, 1]
    lines = {r.getMessage() for r in caplog.records if r.name == "sparkml_par.rank"}
    assert {"[rank 0] line from rank 0", "[rank 1] line from rank 1"} <= lines
    assert sorted(records, key=lambda r: r[0]) == [(0, {"epoch": 1, "rank_seen": 0}), (1, {"epoch": 1, "rank_seen": 1})]


def echo_arguments(name, timeout=None, env=None, num_proc=None):
    """Takes arguments named like launcher options: they are the function's, not the launcher's."""
    import horovod.torch as hvd

    return {"rank": hvd.rank(), "name": name, "timeout": timeout, "env": env, "num_proc": num_proc}


def test_the_functions_own_arguments_reach_it_untouched(spark):
    launcher = launch.Launcher(num_proc=2, timeout=300, env={"HOROVOD_CYCLE_TIME": "1"})
    results = launcher.run(echo_arguments, "job", timeout=5, env={"region": "eu"}, num_proc=7)
    assert results == [
        {"rank": rank, "name": "job", "timeout": 5, "env": {"region": "eu"}, "num_proc": 7} for rank in (0, 1)
    ]


START_TWICE = """
import os
import horovod.torch as hvd
import torch

settings = {"HOROVOD_CYCLE_TIME": "5", "HOROVOD_FUSION_THRESHOLD": "0", "HOROVOD_CACHE_CAPACITY": "0"}
sums = []
for environ in (settings, {}):
    os.environ.update(environ)
    hvd.init()
    sums.append(hvd.allreduce(torch.ones(3), op=hvd.Sum).tolist())
    hvd.shutdown()
    for name in environ:
        del os.environ[name]
print(sums)
"""


def test_horovod_starts_again_in_a_process_whose_last_start_had_settings():
    # Spark runs a later launch's ranks in the Python workers of an earlier one. Unpatched, Horovod 0.28.1
    # kept the earlier cycle time and fusion threshold and, with both set, crashed (SIGSEGV) in the next
    # hvd.init(); the build's patch starts every init from Horovod's defaults.
    environ = {name: value for name, value in os.environ.items() if not name.startswith("HOROVOD_")}
    done = subprocess.run([sys.executable, "-c", START_TWICE], capture_output=True, text=True, timeout=120, env=environ)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]"


def test_invalid_arguments_are_refused(spark):
    with pytest.raises(SparkmlParError, match="num_proc=-1 must be positive"):
        launch.Launcher(num_proc=-1)
    with pytest.raises(SparkmlParError, match="launch mode 'mpi' is not known"):
        launch.Launcher(num_proc=2, mode="mpi")


def _scenario(name: str, *args: str) -> object:
    done = subprocess.run(
        [sys.executable, str(SCENARIOS), name, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_two_ranks_on_separate_executor_jvms():
    results = _scenario("local_cluster")
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["rank"] == r["planned_rank"] and r["size"] == 2 and r["sum"] == 3.0 for r in results)
    assert results[0]["pid"] != results[1]["pid"]
    assert {r["iface"] for r in results} == {"lo"}


@pytest.mark.slow
@pytest.mark.parametrize("gpus", [2, 4])
def test_each_rank_selects_its_own_gpu_with_every_gpu_visible(gpus):
    """One executor, `gpus` GPUs (a fake discovery script), a rank per GPU: each rank's device is the GPU Spark
    gave its task, none is masked (NCCL's peer-to-peer paths need every GPU visible), and local rank i holds
    GPU i, as code written for `set_device(hvd.local_rank())` expects."""
    results = _scenario("fake_gpus", str(gpus))
    assert [r["rank"] for r in results] == list(range(gpus))
    assert sorted(r["assigned"][0] for r in results) == [str(i) for i in range(gpus)]
    for r in results:
        assert len(r["assigned"]) == 1 and r["devices"] == [int(r["assigned"][0])]
        assert r["cuda_visible_devices"] is None
        assert r["local_rank"] == int(r["assigned"][0])


@pytest.mark.slow
def test_dynamic_allocation_is_refused_with_the_setting_named():
    outcome = _scenario("dynamic_allocation")
    assert outcome["error"].startswith(
        "Spark refuses barrier stages while dynamic allocation is on (spark.dynamicAllocation.enabled=true)"
    )


def abort_natively_on_rank_one(marker: str):
    """Rank 1 writes a native error to file descriptor 2, past sys.stderr, and aborts, in every attempt."""
    import horovod.torch as hvd
    import torch

    Path(marker + f".attempt-rank{hvd.rank()}-{os.getpid()}-{time.monotonic_ns()}").touch()
    if hvd.rank() == 1:
        os.write(
            2,
            b"terminate called after throwing an instance of 'gloo::IoException'\n"
            b"  what():  [fake/tcp/pair.cc:210] connect [127.0.0.1]:4242: Connection refused\n",
        )
        os.abort()
    return hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist()


def test_a_native_abort_shows_its_stderr_and_is_not_retried_once_it_repeats(spark, tmp_path):
    with pytest.raises(launch.LaunchError) as info:
        launch.Launcher(num_proc=2).run(abort_natively_on_rank_one, str(tmp_path / "run"))
    message = str(info.value)
    assert message.startswith("rank 1 on host 127.0.0.1 died without raising an error")
    assert (
        "in attempt 2 of 4 with the same error as in attempt 1 (what():  [fake/tcp/pair.cc:210] connect "
        "[127.0.0.1]:4242: Connection refused), so the stage is not run again"
    ) in message
    assert message.splitlines()[-3:] == [
        "--- last lines of rank 1's stderr ---",
        "terminate called after throwing an instance of 'gloo::IoException'",
        "  what():  [fake/tcp/pair.cc:210] connect [127.0.0.1]:4242: Connection refused",
    ]
    assert len(list(tmp_path.glob("run.attempt-rank1-*"))) == 2  # attempts 1 and 2, not all 4


@pytest.mark.parametrize(
    "tails,previous,repeated",
    [
        (
            {1: ["Fatal Python error: Aborted", "what():  connect refused"]},
            {1: ["x", "what():  connect refused"]},
            "what():  connect refused",
        ),
        ({1: ["what():  connect refused"]}, {1: ["what():  timed out"]}, None),  # another error: retry
        ({1: ["epoch 3 done"]}, {1: ["epoch 3 done"]}, None),  # no error line: retry
        ({}, {1: ["what():  connect refused"]}, None),  # nothing seen this time
        # another port, and the other rank died first: the same error all the same
        (
            {0: ["what():  connect [127.0.0.1]:12712: refused"]},
            {1: ["what():  connect [127.0.0.1]:40961: refused"]},
            "what():  connect [127.0.0.1]:12712: refused",
        ),
    ],
)
def test_a_native_error_repeats_only_when_the_same_error_line_returns(tails, previous, repeated):
    from sparkml_par.launch.channel import RankStatus
    from sparkml_par.launch.supervisor import _repeated_native_error

    status = RankStatus(lost={rank: 0.0 for rank in tails} or {1: 0.0}, stderr_tails=tails, attempt=2)
    assert _repeated_native_error(status, previous) == repeated
