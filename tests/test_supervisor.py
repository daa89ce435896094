"""The supervisor's decision, case by case: which failure is the cause, retry or not, which timeout fires.

`decide` is pure: each case builds the channel's snapshot by hand, at a given time, and reads the decision.
The launches that produce these snapshots for real are in test_launch.py.
"""

from __future__ import annotations

import logging

from sparkml_par.launch.channel import ChannelSnapshot, RankStatus
from sparkml_par.launch.supervisor import Limits, Memory, decide

T0 = 1000.0  # time.monotonic() when the job was submitted and its attempt started
WALL = 5000.0  # time.time() of the look
LIMITS = Limits(
    "barrier stage of 2 ranks", num_proc=2, timeout=600, rendezvous_timeout=60, progress_timeout=30, attempts=4
)
RUNNING = dict(
    started={0: WALL, 1: WALL},
    joining={0: WALL, 1: WALL},
    initialized={0: WALL, 1: WALL},
    hosts={0: "10.0.0.1", 1: "10.0.0.2"},
    last_seen={0: WALL, 1: WALL},
    since=T0,
)


def _look(at: float, memory: Memory | None = None, previous_tails=None, slots=None, limits=LIMITS, **status):
    snapshot = ChannelSnapshot(RankStatus(**{**RUNNING, **status}), previous_tails or {})
    return decide(
        snapshot, memory or Memory(submitted=T0, logged=frozenset({("initialized", 1)})), limits, T0 + at, WALL, slots
    )


def _raised(rank: int, error: str, received: float) -> dict:
    return {
        "rank": rank,
        "host": RUNNING["hosts"][rank],
        "error": error,
        "traceback": f"tb {rank}\n",
        "received": received,
    }


def test_running_ranks_call_for_nothing():
    decision = _look(5.0)
    assert decision.error is None and decision.logs == ()


def test_all_ranks_initialized_is_logged_once_with_their_hosts():
    first = _look(1.5, memory=Memory(submitted=T0))
    assert first.logs == (
        (
            logging.INFO,
            "barrier stage of 2 ranks: 2 ranks initialized in 1.50 s, ranks on 2 hosts (10.0.0.1, 10.0.0.2)",
        ),
    )
    assert _look(2.0, memory=first.memory).logs == ()


def test_a_raised_exception_is_the_cause_and_is_not_retried():
    decision = _look(3.0, failures={1: _raised(1, "ValueError: bad batch", WALL)})
    assert decision.error.rank == 1 and decision.error.remote_traceback == "tb 1\n"
    assert str(decision.error).startswith("rank 1 on host 10.0.0.2 failed: ValueError: bad batch")
    assert decision.wait_after_cancel and decision.logs == ()


def test_of_several_ranks_failing_at_once_the_first_received_is_the_cause():
    failures = {0: _raised(0, "RuntimeError: second", WALL + 0.2), 1: _raised(1, "RuntimeError: first", WALL)}
    assert _look(3.0, failures=failures).error.rank == 1


def test_a_dead_rank_waits_for_its_stderr_tail_then_spark_reruns_the_stage():
    waiting = _look(3.0, lost={1: WALL})
    assert waiting.error is None
    assert waiting.logs[0][0] == logging.WARNING and waiting.logs[0][1].startswith(
        "barrier stage of 2 ranks, attempt 1 of 4: rank 1 on host 10.0.0.2 died without raising an error"
    )
    assert waiting.logs[0][1].endswith("; Spark reruns the stage")
    assert not waiting.rerun  # the new attempt's ranks wait for the tail too
    later = _look(3.1, memory=waiting.memory, lost={1: WALL}, stderr_tails={1: ["Killed"]})
    assert later.error is None and later.logs == () and later.rerun  # logged once; retried, not failed


def test_a_dead_rank_is_the_cause_even_when_its_peer_reported_first():
    peer = _raised(0, "HorovodInternalError: Horovod has been shut down", WALL - 1)
    decision = _look(3.0, failures={0: peer}, lost={1: WALL}, stderr_tails={1: []}, attempt=4)
    assert decision.error.rank == 1
    assert "died without raising an error" in str(decision.error) and "so no attempt is left" in str(decision.error)


def test_the_same_native_error_in_two_attempts_in_a_row_is_not_retried():
    decision = _look(
        3.0,
        lost={0: WALL},
        stderr_tails={0: ["terminate called: Connection refused 10.0.0.2:4711"]},
        previous_tails={1: ["terminate called: Connection refused 10.0.0.2:5020"]},
        attempt=2,
    )
    assert decision.error.rank == 0
    assert "with the same error as in attempt 1 (terminate called: Connection refused 10.0.0.2:4711)" in str(
        decision.error
    )


def test_a_dead_rank_whose_host_left_fails_at_once_when_the_rest_cannot_hold_the_ranks():
    assert _look(3.0, lost={1: WALL}, stderr_tails={1: []}, slots=2).error is None
    decision = _look(3.0, lost={1: WALL}, stderr_tails={1: []}, slots=1)
    assert "the cluster now has 1 task slot, fewer than the ranks (host 10.0.0.2 left it?)" in str(decision.error)
    # What a caller needs to go on with fewer ranks (train.min_proc): the slots left and when the rank was lost.
    assert (decision.error.slots, decision.error.lost_at, decision.error.host) == (1, WALL, "10.0.0.2")


def test_a_rank_failure_that_fewer_ranks_cannot_cure_carries_no_slots():
    decision = _look(3.0, lost={1: WALL}, stderr_tails={1: []}, slots=1, attempt=4)
    assert decision.error is not None and (decision.error.slots, decision.error.lost_at) == (None, None)


def test_ranks_missing_from_the_rendezvous_are_named_when_it_times_out():
    status = dict(started={0: WALL}, joining={0: WALL}, initialized={}, hosts={0: "10.0.0.1"})
    assert _look(59.0, **status).error is None
    error = _look(61.0, **status).error
    assert str(error).startswith(
        "barrier stage of 2 ranks: ranks [1] of 2 did not reach the Horovod rendezvous "
        "within 60 s (ranks [1] never started); ranks [0] were waiting for them"
    )


def test_a_silent_rank_is_named_after_the_progress_timeout():
    decision = _look(100.0, last_seen={0: WALL, 1: WALL - 31})
    assert decision.error.rank == 1 and "ranks [1] made no progress for 30 s" in str(decision.error)
    assert _look(100.0, last_seen={0: WALL, 1: WALL - 31}, finished={1: WALL - 31}).error is None


def test_the_launch_timeout_names_the_ranks_that_finished():
    error = _look(601.0, finished={0: WALL}).error
    assert str(error) == (
        "barrier stage of 2 ranks: did not finish within timeout=600 s; the stage was cancelled (ranks finished: [0])"
    )
