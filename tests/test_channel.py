"""The rank channel over real sockets: a rank of the stage attempt Spark starts after a failure runs only
once the supervisor has decided the failure calls for it, and is turned away when the launch ends instead.
The supervisor's side of it runs for real in test_launch.py."""

from __future__ import annotations

import threading
import time

import pytest

from sparkml_par.launch.channel import DriverChannel, RankChannel


def _start(channel: DriverChannel, rank: int, task_id: int) -> RankChannel:
    rank_channel = RankChannel(channel.address, channel.token, rank)
    assert rank_channel.start(30.0, host="127.0.0.1", task=rank, pid=0, task_id=task_id)
    return rank_channel


def _failed_first_attempt(channel: DriverChannel) -> RankChannel:
    """Ranks 0 and 1 of attempt 1 (tasks 10 and 11) started; rank 1's process died."""
    survivor = _start(channel, 0, 10)
    _start(channel, 1, 11).close()
    while not channel.snapshot().status.lost:
        time.sleep(0.01)
    return survivor


def _start_in_background(channel: DriverChannel, rank: int, task_id: int):
    """(the rank's channel, kept open by the caller; the thread asking to start; the answers it got)."""
    answers: list[bool] = []
    rank_channel = RankChannel(channel.address, channel.token, rank)
    thread = threading.Thread(
        target=lambda: answers.append(rank_channel.start(30.0, host="127.0.0.1", task=rank, pid=0, task_id=task_id))
    )
    thread.start()
    return rank_channel, thread, answers


@pytest.mark.parametrize("decision", ["rerun", "end"])
def test_a_rank_of_the_next_attempt_waits_for_the_decision_on_the_failed_one(decision):
    with DriverChannel("127.0.0.1", attempts=4) as channel:
        survivor = _failed_first_attempt(channel)
        rank_channel, thread, answers = _start_in_background(channel, 0, 12)
        thread.join(timeout=1.0)
        assert thread.is_alive() and answers == []  # held: the supervisor has not decided
        assert channel.snapshot().status.attempt == 1 and 1 in channel.snapshot().status.lost
        if decision == "rerun":
            channel.admit_rerun(1)
        else:
            channel.refuse_reruns()
        thread.join(timeout=30)
        status = channel.snapshot().status
        if decision == "rerun":
            assert answers == [True]
            assert status.attempt == 2 and status.started.keys() == {0} and not status.lost
        else:
            assert answers == [False]
            assert status.attempt == 1 and status.lost.keys() == {1}
        rank_channel.close()
        survivor.close()


def test_ranks_of_a_running_attempt_and_of_a_launch_that_cannot_rerun_are_never_held():
    with DriverChannel("127.0.0.1", attempts=1) as channel:
        survivor = _failed_first_attempt(channel)
        _start(channel, 0, 12).close()  # admitted at once: with attempts=1 there is no rerun to wait for
        survivor.close()
    with DriverChannel("127.0.0.1", attempts=4) as channel:
        ranks = [_start(channel, rank, 10 + rank) for rank in range(2)]
        assert channel.snapshot().status.started.keys() == {0, 1}
        for rank_channel in ranks:
            rank_channel.close()
