"""The driver's watch over a running launch: failures within seconds, timeouts that name ranks.

Both launchers (barrier stage, local processes) hand the supervisor a job it can wait on and cancel;
rank events arrive on the channel. The first failed rank wins: its error and remote traceback become
the driver's error, and the job is cancelled so no rank is left waiting in a collective. A rank
process that died is the one failure a new attempt can cure: while attempts remain, the supervisor
lets Spark rerun the stage instead of cancelling it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any, Protocol

from sparkml_par.errors import SparkmlParError
from sparkml_par.launch.channel import DriverChannel, RankStatus
from sparkml_par.launch.rank import FAILURE_MARKER

log = logging.getLogger("sparkml_par.launch")

_FAILURE_PATTERN = re.compile(re.escape(FAILURE_MARKER) + r"(\{.*?\})" + re.escape(FAILURE_MARKER), re.S)


class LaunchError(SparkmlParError):
    """A launch that failed; `rank`, `host` and `remote_traceback` are set when a rank raised."""

    def __init__(self, message: str, rank: int | None = None, host: str | None = None,
                 remote_traceback: str | None = None):
        super().__init__(message)
        self.rank, self.host, self.remote_traceback = rank, host, remote_traceback


class Job(Protocol):
    def wait(self, seconds: float) -> bool: ...
    def cancel(self) -> None: ...
    def result(self) -> list[Any]: ...


def supervise(job: Job, channel: DriverChannel, num_proc: int, timeout: float, rendezvous_timeout: float,
              what: str, progress_timeout: float = 0.0, attempts: int = 1) -> list[Any]:
    """Waits for the job; progress_timeout > 0 fails it when an initialized rank sends nothing for that long.

    attempts is how many times Spark runs the stage (spark.stage.maxConsecutiveAttempts for a barrier
    stage); rendezvous and progress timeouts apply to each attempt from its own start.
    """
    submitted = time.monotonic()
    logged: set[tuple[str, int]] = set()
    try:
        while not job.wait(0.2):
            status = channel.status
            now = time.monotonic()
            if status.failed:
                if status.retryable() and status.attempt < attempts:
                    if ("retry", status.attempt) not in logged:
                        log.warning("%s, attempt %d of %d: %s; Spark reruns the stage", what, status.attempt,
                                    attempts, str(_failure_error(status)).splitlines()[0])
                        logged.add(("retry", status.attempt))
                    continue
                job.cancel()
                job.wait(10)
                raise _failure_error(status, attempts)
            if ("initialized", status.attempt) not in logged and len(status.initialized) == num_proc:
                log.info("%s: %d ranks initialized in %.2f s", what, num_proc, now - status.since)
                logged.add(("initialized", status.attempt))
            if len(status.initialized) < num_proc and now - status.since > rendezvous_timeout:
                job.cancel()
                raise LaunchError(_rendezvous_timeout_message(what, status, num_proc, rendezvous_timeout))
            if progress_timeout and len(status.initialized) == num_proc:
                silent = sorted(rank for rank in range(num_proc) if rank not in status.finished
                                and time.time() - status.last_seen.get(rank, 0.0) > progress_timeout)
                if silent:
                    job.cancel()
                    raise LaunchError(
                        f"{what}: ranks {silent} made no progress for {progress_timeout:g} s (no step, log or "
                        f"heartbeat); the stage was cancelled instead of waiting forever. A stalled rank is "
                        f"usually stuck in I/O or in a collective another rank never joined; raise "
                        f"train.step_timeout if steps are legitimately that slow", rank=silent[0])
            if now - submitted > timeout:
                job.cancel()
                raise LaunchError(f"{what}: did not finish within timeout={timeout:g} s; the stage was cancelled "
                                  f"(ranks finished: {sorted(status.finished)})")
    except KeyboardInterrupt:
        log.warning("%s: interrupted, cancelling the ranks", what)
        job.cancel()
        raise
    try:
        return job.result()
    except LaunchError:
        raise
    except Exception as exc:
        if channel.status.failed:
            raise _failure_error(channel.status, attempts) from None
        if match := _FAILURE_PATTERN.search(str(exc)):
            raise _rank_error(json.loads(match.group(1))) from None
        raise LaunchError(f"{what}: failed before any rank reported an error:\n{_python_error(str(exc))}") from exc


def _rendezvous_timeout_message(what: str, status: RankStatus, num_proc: int, rendezvous_timeout: float) -> str:
    ranks = set(range(num_proc))
    missing = sorted(ranks - set(status.joining))
    waiting = sorted(set(status.joining) - set(status.initialized))
    never_started = sorted(ranks - set(status.started))
    detail = f" (ranks {never_started} never started)" if never_started else ""
    waited = f"; ranks {waiting} were waiting for them" if waiting else ""
    return (f"{what}: ranks {missing} of {num_proc} did not reach the Horovod rendezvous within "
            f"{rendezvous_timeout:g} s{detail}{waited}; the stage was cancelled. Check those ranks' logs above, "
            f"or raise the rendezvous timeout if executors are slow to start")


def _failure_error(status: RankStatus, attempts: int = 1) -> LaunchError:
    """A rank whose process died before the first reported failure is the cause; the failures that
    follow are its peers losing it in a collective."""
    first = status.first_failure()
    died = sorted((at, rank) for rank, at in status.lost.items() if first is None or at <= first["received"])
    if not died:
        return _rank_error(first)
    rank = died[0][1]
    host = status.hosts.get(rank, "?")
    progress = status.last_progress.get(rank)
    where = f" after its last progress record {progress}" if progress else " before reporting any progress"
    followed = f"; then rank {first['rank']} failed: {first.get('error', '')}" if first else ""
    retries = (f" in attempt {status.attempt} of {attempts} (spark.stage.maxConsecutiveAttempts), so no attempt "
               f"is left" if attempts > 1 else "")
    return LaunchError(f"rank {rank} on host {host} died without raising an error (its process exited: killed, "
                       f"out of memory, or a crash in native code){where}{retries}{followed}", rank=rank, host=host)


def _rank_error(failure: dict) -> LaunchError:
    rank, host = int(failure["rank"]), failure.get("host", "?")
    remote = failure.get("traceback", "")
    return LaunchError(
        f"rank {rank} on host {host} failed: {failure.get('error', '')}\n--- remote traceback (rank {rank}) ---\n"
        f"{remote.rstrip()}",
        rank=rank, host=host, remote_traceback=remote,
    )


def _python_error(text: str) -> str:
    """The first Python traceback inside a Spark error (the JVM stack around it says nothing useful)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line), None)
    if start is None:
        return "\n".join(lines[:5])
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("\tat ") or not lines[i].strip()),
               len(lines))
    return "\n".join(lines[start:end])
