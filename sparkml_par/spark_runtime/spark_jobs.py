"""The Spark jobs the project starts, named and, where they run long, in the background and cancellable.

Every job runs under a job group whose description says what it is ("prepare: validate", "train: barrier
stage of 2 ranks"): Spark's UI shows it instead of "$anonfun$withThreadLocalCaptured$2", and the progress
lines (sparkml_par.progress) name the same thing, through the groups open now (`open_groups`).
Job groups and descriptions are local properties of the thread that submits the job (PySpark pins a
JVM thread to each Python thread), so a background job sets them in its own thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from typing import Callable, Generic, Iterator, Optional, TypeVar

T = TypeVar("T")

_GROUP = "spark.jobGroup.id"
_DESCRIPTION = "spark.job.description"
_INTERRUPT = "spark.job.interruptOnCancel"

_lock = threading.Lock()
_open: dict[str, str] = {}  # job group -> description, for the groups open now


def open_groups() -> dict[str, str]:
    """A copy of the job groups open now and their descriptions."""
    with _lock:
        return dict(_open)


def current_group(sc) -> Optional[str]:
    """The job group of jobs this thread would start now (None outside any spark_job)."""
    return sc.getLocalProperty(_GROUP)


def current_description(sc) -> Optional[str]:
    """The description of jobs this thread would start now (None outside any spark_job)."""
    return sc.getLocalProperty(_DESCRIPTION)


class JobName:
    """The job group a spark_job opened: its id (to cancel it) and its description, which can change as the
    work moves on to its next step."""

    def __init__(self, sc, group: str, description: str, interrupt_on_cancel: bool):
        self._sc = sc
        self.group = group
        self._interrupt = interrupt_on_cancel
        self.rename(description)

    def rename(self, description: str) -> None:
        """Jobs this thread starts from now on carry `description`."""
        self._sc.setJobGroup(self.group, description, interruptOnCancel=self._interrupt)
        with _lock:
            _open[self.group] = description


@contextlib.contextmanager
def spark_job(sc, description: str, interrupt_on_cancel: bool = False) -> Iterator[JobName]:
    """Jobs this thread starts inside run in a fresh job group with this description.

    The thread's previous group and description come back afterwards, so named steps nest.
    """
    previous = {key: sc.getLocalProperty(key) for key in (_GROUP, _DESCRIPTION, _INTERRUPT)}
    name = JobName(sc, f"sparkml_par-{uuid.uuid4().hex[:12]}", description, interrupt_on_cancel)
    try:
        yield name
    finally:
        with _lock:
            _open.pop(name.group, None)
        for key, value in previous.items():
            sc.setLocalProperty(key, value)  # None removes the property


# How long a job whose action has ended is waited for, at most, when its caller set no limit: a task that does
# not answer its kill does not hold the caller forever.
_TASK_REPORTS_WAIT_S = 30


class BackgroundJob(Generic[T]):
    """A Spark action run in a background thread under its own named job group, cancellable from any thread.

    The supervising thread stays free to watch progress, deadlines and stop requests while the job runs.
    """

    def __init__(self, sc, action: Callable[[], T], description: str):
        self._sc = sc
        self._result: Optional[T] = None
        self._error: Optional[BaseException] = None
        self._group: Optional[str] = None
        self._started = threading.Event()

        def run() -> None:
            try:
                with spark_job(sc, description, interrupt_on_cancel=True) as name:
                    self._group = name.group
                    self._started.set()
                    self._result = action()
            except BaseException as exc:  # handed to the supervising thread
                self._error = exc
            finally:
                self._started.set()

        self._thread = threading.Thread(target=run, name=f"spark-job: {description}", daemon=True)
        self._thread.start()
        self._started.wait()

    def wait(self, seconds: Optional[float]) -> bool:
        """True once the job has ended: its action returned or failed and Spark reported each of its tasks
        ended. A cancelled job fails at once while its tasks end later, and a task's end that reaches a stopped
        scheduler is logged as an error in place of Spark's report of it. Waits at most `seconds`; None waits
        for the action as long as it takes and then for the reports at most _TASK_REPORTS_WAIT_S."""
        started = time.monotonic()
        self._thread.join(seconds)
        if self._thread.is_alive():
            return False
        deadline = (started + seconds) if seconds is not None else (time.monotonic() + _TASK_REPORTS_WAIT_S)
        while self._reported_active_tasks() > 0:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def cancel(self) -> None:
        if self._group is not None:
            self._sc.cancelJobGroup(self._group)

    def _reported_active_tasks(self) -> int:
        """The job's tasks that Spark's status store still counts as running (0 once the driver JVM is gone)."""
        from py4j.protocol import Py4JError

        if self._group is None:
            return 0
        try:
            tracker = self._sc.statusTracker()
            jobs = [tracker.getJobInfo(job_id) for job_id in tracker.getJobIdsForGroup(self._group)]
            stages = [tracker.getStageInfo(stage_id) for job in jobs if job for stage_id in job.stageIds]
        except (Py4JError, ConnectionError):
            return 0
        return sum(stage.numActiveTasks for stage in stages if stage)

    def result(self) -> T:
        """The action's value, or its exception raised here; waits for the job to finish."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result
