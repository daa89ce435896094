"""The driver's watch over a running launch: failures within seconds, timeouts that name ranks.

Both launchers (barrier stage, local processes) hand the supervisor a job it can wait on and cancel;
rank events arrive on the channel. The first failed rank wins: its error and remote traceback become
the driver's error, and the job is cancelled so no rank is left waiting in a collective. A rank
process that died is the one failure a new attempt can cure: while attempts remain, the supervisor
lets Spark rerun the stage instead of cancelling it. The ranks of a rerun wait at the channel until the
supervisor has decided so, so a rerun that is not wanted never reaches the user's function.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from typing import Any, Callable, Protocol

from sparkml_par.errors import SparkmlParError
from sparkml_par.launch.channel import PEER_LOST_ERRORS, ChannelSnapshot, DriverChannel, RankStatus
from sparkml_par.launch.rank import FAILURE_MARKER

log = logging.getLogger("sparkml_par.launch")

_FAILURE_PATTERN = re.compile(re.escape(FAILURE_MARKER) + r"(\{.*?\})" + re.escape(FAILURE_MARKER), re.S)
# Seconds to wait for a dead rank's stderr tail before deciding on the failure, and lines of it shown;
# seconds after a rank died to keep asking whether the cluster still holds every rank.
_TAIL_WAIT = 3.0
_CAPACITY_WAIT = 15.0
_TAIL_SHOWN = 12
# A native error line: "terminate called after throwing ...", "what(): ...", "... Exception ...", "Error: ...".
_ERROR_LINE = re.compile(r"error|exception|terminate called|what\(\)|abort|fatal", re.I)


class LaunchError(SparkmlParError):
    """A launch that failed; `rank`, `host` and `remote_traceback` are set when a rank raised. When a rank
    died with its host and the cluster can no longer hold every rank, `slots` is the task slots left and
    `lost_at` the time.time() the driver lost the rank: a caller may launch again on fewer ranks."""

    def __init__(
        self,
        message: str,
        rank: int | None = None,
        host: str | None = None,
        remote_traceback: str | None = None,
        slots: int | None = None,
        lost_at: float | None = None,
    ):
        super().__init__(message)
        self.rank, self.host, self.remote_traceback = rank, host, remote_traceback
        self.slots, self.lost_at = slots, lost_at


class Job(Protocol):
    def wait(self, seconds: float) -> bool: ...
    def cancel(self) -> None: ...
    def result(self) -> list[Any]: ...


@dataclasses.dataclass(frozen=True)
class Limits:
    """What a launch allows: its ranks, attempts and time limits (see supervise)."""

    what: str  # "barrier stage of 2 ranks", for messages
    num_proc: int
    timeout: float
    rendezvous_timeout: float
    progress_timeout: float = 0.0
    attempts: int = 1


@dataclasses.dataclass(frozen=True)
class Memory:
    """What the supervisor remembers between looks: when it submitted the job (time.monotonic()), the lines
    it logged and when it first saw each attempt fail."""

    submitted: float
    logged: frozenset[tuple[str, int]] = frozenset()
    failed_since: tuple[tuple[int, float], ...] = ()


@dataclasses.dataclass(frozen=True)
class Decision:
    """What to do after one look: log these lines, and fail with `error` (cancelling the job) when set, or
    admit the ranks of Spark's rerun of the failed stage attempt when `rerun`."""

    memory: Memory
    logs: tuple[tuple[int, str], ...] = ()
    error: LaunchError | None = None
    # A failed rank's job is cancelled and given a moment to stop before the error is raised.
    wait_after_cancel: bool = False
    rerun: bool = False


def supervise(
    job: Job,
    channel: DriverChannel,
    limits: Limits,
    on_progress: Callable[[int, dict], None],
    capacity: Callable[[], int] | None = None,
) -> list[Any]:
    """Waits for the job, looking at the channel every 0.2 s: snapshot, decide, act.

    Each look hands the progress records that arrived to `on_progress` (user code, run on this thread),
    takes a snapshot of the channel under its lock, decides in `decide` (a pure function) and acts on the
    decision: log, or cancel the job and raise. capacity() is the cluster's task slots now: when a rank
    died with its host, a rerun that no longer fits fails at once instead of waiting for slots that are gone.
    """
    decision = Decision(Memory(submitted=time.monotonic()))
    try:
        while decision.error is None and not job.wait(0.2):
            for rank, record in channel.take_progress():
                on_progress(rank, record)
            snapshot = channel.snapshot()
            slots = capacity() if capacity is not None and snapshot.status.lost else None
            decision = decide(snapshot, decision.memory, limits, time.monotonic(), time.time(), slots)
            for level, line in decision.logs:
                log.log(level, "%s", line)
            if decision.rerun:
                channel.admit_rerun(snapshot.status.attempt)
    except KeyboardInterrupt:
        log.warning("%s: interrupted, cancelling the ranks", limits.what)
        _stop(job, channel)
        raise
    except BaseException:  # the progress callback's own error: no rank is left running
        _stop(job, channel)
        raise
    if decision.error is not None:
        _stop(job, channel)
        if decision.wait_after_cancel:
            job.wait(10)
        raise decision.error
    try:
        return job.result()
    except LaunchError:
        raise
    except Exception as exc:
        status = channel.snapshot().status
        if status.failed:
            raise _failure_error(status, limits.attempts) from None
        if match := _FAILURE_PATTERN.search(str(exc)):
            raise _rank_error(json.loads(match.group(1))) from None
        raise LaunchError(
            f"{limits.what}: failed before any rank reported an error:\n{_python_error(str(exc))}"
        ) from exc


def _stop(job: Job, channel: DriverChannel) -> None:
    """Cancels the job, and turns away the ranks of a stage attempt Spark may have started meanwhile."""
    job.cancel()
    channel.refuse_reruns()


def decide(
    snapshot: ChannelSnapshot, memory: Memory, limits: Limits, now: float, wall_time: float, slots: int | None
) -> Decision:
    """What one look at the ranks calls for. Pure, so each case is a unit test.

    `now` is time.monotonic() (the clock of submitted, failed_since and status.since), `wall_time` is
    time.time() (the clock of the ranks' last-seen times), `slots` the cluster's task slots now, or None.
    """
    status, what, num_proc = snapshot.status, limits.what, limits.num_proc
    logged, failed_since = set(memory.logged), dict(memory.failed_since)
    logs: list[tuple[int, str]] = []

    def decision(error: LaunchError | None = None, wait_after_cancel: bool = False, rerun: bool = False) -> Decision:
        remembered = dataclasses.replace(
            memory, logged=frozenset(logged), failed_since=tuple(sorted(failed_since.items()))
        )
        return Decision(remembered, tuple(logs), error, wait_after_cancel, rerun)

    if status.failed:
        retrying = status.retryable() and status.attempt < limits.attempts
        if retrying and ("retry", status.attempt) not in logged:
            logs.append(
                (
                    logging.WARNING,
                    f"{what}, attempt {status.attempt} of {limits.attempts}: "
                    f"{str(_failure_error(status)).splitlines()[0]}; Spark reruns the stage",
                )
            )
            logged.add(("retry", status.attempt))
        # A rank that died sends its last stderr lines from a child process: give them a moment.
        waited = now - failed_since.setdefault(status.attempt, now)
        if any(rank not in status.stderr_tails for rank in status.lost) and waited < _TAIL_WAIT:
            return decision()
        repeated = _repeated_native_error(status, snapshot.previous_stderr_tails)
        # Spark notices a lost executor within seconds: the cluster's slots are asked about for that long.
        shrunk = (
            slots
            if retrying and status.lost and slots is not None and slots < num_proc and waited <= _CAPACITY_WAIT
            else None
        )
        if retrying and not repeated and shrunk is None:
            return decision(rerun=True)
        return decision(_failure_error(status, limits.attempts, repeated, shrunk), wait_after_cancel=True)
    if ("initialized", status.attempt) not in logged and len(status.initialized) == num_proc:
        hosts = sorted(set(status.hosts.values()))
        logs.append(
            (
                logging.INFO,
                f"{what}: {num_proc} ranks initialized in {now - status.since:.2f} s, ranks on "
                f"{len(hosts)} host{'' if len(hosts) == 1 else 's'} ({', '.join(hosts)})",
            )
        )
        logged.add(("initialized", status.attempt))
    if len(status.initialized) < num_proc and now - status.since > limits.rendezvous_timeout:
        return decision(LaunchError(_rendezvous_timeout_message(what, status, num_proc, limits.rendezvous_timeout)))
    if limits.progress_timeout and len(status.initialized) == num_proc:
        silent = sorted(
            rank
            for rank in range(num_proc)
            if rank not in status.finished and wall_time - status.last_seen.get(rank, 0.0) > limits.progress_timeout
        )
        if silent:
            return decision(
                LaunchError(
                    f"{what}: ranks {silent} made no progress for {limits.progress_timeout:g} s (no step, log or "
                    f"heartbeat); the stage was cancelled instead of waiting forever. A stalled rank is usually "
                    f"stuck in I/O or in a collective another rank never joined; raise train.step_timeout if "
                    f"steps are legitimately that slow",
                    rank=silent[0],
                )
            )
    if now - memory.submitted > limits.timeout:
        return decision(
            LaunchError(
                f"{what}: did not finish within timeout={limits.timeout:g} s; the stage was "
                f"cancelled (ranks finished: {sorted(status.finished)})"
            )
        )
    return decision()


def _rendezvous_timeout_message(what: str, status: RankStatus, num_proc: int, rendezvous_timeout: float) -> str:
    ranks = set(range(num_proc))
    missing = sorted(ranks - set(status.joining))
    waiting = sorted(set(status.joining) - set(status.initialized))
    never_started = sorted(ranks - set(status.started))
    detail = f" (ranks {never_started} never started)" if never_started else ""
    waited = f"; ranks {waiting} were waiting for them" if waiting else ""
    return (
        f"{what}: ranks {missing} of {num_proc} did not reach the Horovod rendezvous within "
        f"{rendezvous_timeout:g} s{detail}{waited}; the stage was cancelled. Check those ranks' logs above, "
        f"or raise the rendezvous timeout if executors are slow to start"
    )


def _native_error(lines: list[str] | None) -> str | None:
    """The line of a dead rank's stderr that says what went wrong: its last line naming an error."""
    for line in reversed(lines or []):
        if _ERROR_LINE.search(line):
            return line.strip()
    return None


def _repeated_native_error(status: RankStatus, previous_tails: dict[int, list[str]]) -> str | None:
    """The error line a rank that died in this attempt shares with a rank that died in the attempt before:
    a new attempt would only repeat it. Numbers (ports, addresses, pids) differ between attempts and
    the rank that dies first may too, so lines are compared with their numbers masked, across ranks."""
    if status.attempt < 2:
        return None
    before = {_masked(line) for line in map(_native_error, previous_tails.values()) if line is not None}
    for rank in status.lost:
        line = _native_error(status.stderr_tails.get(rank))
        if line is not None and _masked(line) in before:
            return line
    return None


def _masked(line: str) -> str:
    return re.sub(r"\d+", "#", line)


def _failure_error(
    status: RankStatus, attempts: int = 1, repeated: str | None = None, shrunk: int | None = None
) -> LaunchError:
    """A rank whose process died before the first reported failure is the cause; the failures that
    follow are its peers losing it in a collective."""
    first = status.first_failure()
    # A peer's "Horovod has been shut down" names no culprit: a rank that died is the cause even when its
    # closed connection was noticed a moment after the peer's error arrived.
    peer_lost = first is not None and first.get("error", "").startswith(PEER_LOST_ERRORS)
    died = sorted(
        (at, rank) for rank, at in status.lost.items() if first is None or peer_lost or at <= first["received"]
    )
    if not died:
        return _rank_error(first)
    rank = died[0][1]
    host = status.hosts.get(rank, "?")
    progress = status.last_progress.get(rank)
    where = f" after its last progress record {progress}" if progress else " before reporting any progress"
    followed = f"; then rank {first['rank']} failed: {first.get('error', '')}" if first else ""
    if shrunk is not None:
        retries = (
            f"; the cluster now has {shrunk} task slot{'' if shrunk == 1 else 's'}, fewer than the ranks "
            f"(host {host} left it?), so Spark cannot run the stage again: bring the host back or lower "
            f"num_proc, then run again"
        )
    elif repeated:
        retries = (
            f" in attempt {status.attempt} of {attempts} with the same error as in attempt "
            f"{status.attempt - 1} ({repeated}), so the stage is not run again: it would fail the same way"
        )
    elif attempts > 1:
        retries = (
            f" in attempt {status.attempt} of {attempts} (spark.stage.maxConsecutiveAttempts), so no attempt is left"
        )
    else:
        retries = ""
    tail = status.stderr_tails.get(rank)
    seen = (f"\n--- last lines of rank {rank}'s stderr ---\n" + "\n".join(tail[-_TAIL_SHOWN:])) if tail else ""
    return LaunchError(
        f"rank {rank} on host {host} died without raising an error (its process exited: killed, "
        f"out of memory, or a crash in native code){where}{retries}{followed}{seen}",
        rank=rank,
        host=host,
        remote_traceback="\n".join(tail) if tail else None,
        slots=shrunk,
        lost_at=died[0][0] if shrunk is not None else None,
    )


def _rank_error(failure: dict) -> LaunchError:
    rank, host = int(failure["rank"]), failure.get("host", "?")
    remote = failure.get("traceback", "")
    return LaunchError(
        f"rank {rank} on host {host} failed: {failure.get('error', '')}\n--- remote traceback (rank {rank}) ---\n"
        f"{remote.rstrip()}",
        rank=rank,
        host=host,
        remote_traceback=remote,
    )


def _python_error(text: str) -> str:
    """The first Python traceback inside a Spark error (the JVM stack around it says nothing useful)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line), None)
    if start is None:
        return "\n".join(lines[:5])
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith("\tat ") or not lines[i].strip()), len(lines)
    )
    return "\n".join(lines[start:end])
