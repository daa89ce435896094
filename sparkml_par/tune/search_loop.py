"""Keeps `parallelism` trials in flight and feeds their results to the sampler as they arrive.

Each trial runs in its own driver thread (for Spark: one job of one task, see `trials.py`). The
search loop's thread alone talks to the study: workers put their intermediate values and outcomes on
one queue, so the sampler is told a result the moment it lands and asked for the next trial at once.
A trial that raises, diverges or is pruned becomes a failed or pruned record; the search goes on.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
from typing import Any, Callable

from sparkml_par.tune.study import Search, TrialOutcome, TrialRequest

log = logging.getLogger("sparkml_par.tune")


class TrialControl:
    """A running trial's line to the search loop: report intermediate values, learn when to stop."""

    def __init__(self, number: int, events: queue.Queue):
        self.number = number
        self._events = events
        self._stop = threading.Event()
        self.stop_reason: str | None = None
        self.stop_message: str | None = None

    def report(self, step: int, value: float) -> None:
        """One intermediate value (e.g. the tuned metric after epoch `step`)."""
        self._events.put(("progress", self.number, (step, value)))

    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def wait_for_stop(self, seconds: float) -> bool:
        return self._stop.wait(seconds)

    def request_stop(self, reason: str, message: str) -> None:
        self.stop_reason, self.stop_message = reason, message
        self._stop.set()


Evaluate = Callable[[TrialRequest, TrialControl], TrialOutcome]


def run_search(
    search: Search, evaluate: Evaluate, parallelism: int, on_finished: Callable[[Any], None] | None = None
) -> int:
    """Runs trials until the budget is spent; returns how many ran. `evaluate` runs in worker threads."""
    events: queue.Queue = queue.Queue()
    running: dict[int, TrialControl] = {}
    threads: list[threading.Thread] = []
    ran = 0
    try:
        while True:
            while len(running) < parallelism and (request := search.ask()) is not None:
                control = TrialControl(request.number, events)
                running[request.number] = control
                log.info("trial %d started: %s", request.number, _params_text(request.params))
                thread = threading.Thread(
                    target=_evaluate_in_thread,
                    args=(evaluate, request, control, events),
                    name=f"tune-trial-{request.number}",
                    daemon=True,
                )
                thread.start()
                threads.append(thread)
            if not running:
                return ran
            kind, number, payload = events.get()
            if kind == "progress":
                _on_progress(search, running.get(number), *payload)
                continue
            running.pop(number)
            frozen = search.tell(number, payload)
            ran += 1
            _log_finished(frozen, search)
            if on_finished is not None:
                on_finished(frozen)
    except BaseException:
        for control in running.values():
            control.request_stop("interrupted", "the search stopped while this trial ran")
        for thread in threads:
            thread.join(timeout=30)
        raise


def _evaluate_in_thread(evaluate: Evaluate, request: TrialRequest, control: TrialControl, events: queue.Queue) -> None:
    started = time.time()
    try:
        outcome = evaluate(request, control)
    except BaseException as exc:  # noqa: BLE001 - any error of one trial is that trial's result; the
        # search loop waits for every trial's outcome, so this thread must post one whatever happened
        log.debug("trial %d raised:\n%s", request.number, traceback.format_exc())
        outcome = TrialOutcome("failed", error=f"{type(exc).__name__}: {exc}", started=started, finished=time.time())
    if control.stop_reason is not None and outcome.status != "complete":
        # The trial stopped because it was told to: its outcome is what the search loop decided. One that
        # finished all its epochs before the request reached it keeps its complete result.
        status = "pruned" if control.stop_reason == "pruned" else "failed"
        outcome = TrialOutcome(
            status,
            error=None if status == "pruned" else control.stop_message,
            started=outcome.started or started,
            finished=outcome.finished or time.time(),
            details=outcome.details,
        )
    events.put(("finished", request.number, outcome))


def _on_progress(search: Search, control: TrialControl | None, step: int, value: float) -> None:
    if control is None or control.stop_requested():
        return
    reason = search.report(control.number, step, value)
    if reason == "diverged":
        control.request_stop(reason, f"diverged: the metric is {value} at step {step}")
    elif reason == "pruned":
        control.request_stop(reason, f"pruned at step {step} (value {value:.4g})")
    log.info("trial %d step %d: %.4g%s", control.number, step, value, f", stopping it ({reason})" if reason else "")


def _log_finished(frozen, search: Search) -> None:
    done = len(search.finished_trials())
    status = frozen.user_attrs.get("status", frozen.state.name.lower())
    duration = frozen.user_attrs.get("duration")
    took = f" in {duration:.1f} s" if duration is not None else ""
    if status == "complete":
        log.info("trial %d complete: score %.4g%s [%d/%d]", frozen.number, frozen.value, took, done, search.budget)
    elif status == "pruned":
        log.info("trial %d pruned%s [%d/%d]", frozen.number, took, done, search.budget)
    else:
        log.warning(
            "trial %d failed%s: %s [%d/%d]",
            frozen.number,
            took,
            (str(frozen.user_attrs.get("error") or "").splitlines() or [""])[0],
            done,
            search.budget,
        )


def _params_text(params: dict[str, Any]) -> str:
    return " ".join(
        f"{key.removeprefix('train.')}={value!r}"
        if not isinstance(value, float)
        else f"{key.removeprefix('train.')}={value:.4g}"
        for key, value in params.items()
    )
