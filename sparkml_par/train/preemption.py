"""SIGTERM as a request to stop after the current step, agreed by every rank, with a checkpoint there.

Spot reclaims, Kubernetes evictions and Spark's executor decommissioning send SIGTERM and leave a grace
period before the kill; dying at once would lose the work since the last checkpoint. While a rank trains,
SIGTERM only notes the time; the ranks sum what they noted (one all-reduce) in Horovod's background thread
while the next step computes, so every rank learns of a request at the same step, writes one checkpoint and
stops (a blocking sum would add a wait for every rank to every step). Each sum is a collective of its own,
a cost every step would pay where steps take milliseconds, so the ranks agree every step only where a step
takes AGREE_SECONDS or longer, and otherwise every so many steps that they agree about every AGREE_SECONDS:
rank 0 picks that number from its step time and hands it to the others in the same sum.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Callable

import torch

from sparkml_par.train import distributed

# How often the ranks agree whether one was sent SIGTERM, at most: a request waits for the next agreement.
AGREE_SECONDS = 0.1


class Preemption:
    """Holds the SIGTERM handler while training runs (the process's own handler comes back on exit)."""

    def __init__(self) -> None:
        self.signalled_at: float | None = None  # time.time() of this rank's SIGTERM
        self._previous = None
        self._pending: Callable[[], torch.Tensor] | None = None
        self._skip = 0  # steps until the next sum starts, the same on every rank
        self._started = time.perf_counter()  # when the last sum started
        self._steps = 0  # steps since

    def __enter__(self) -> "Preemption":
        # Only a process's main thread may set handlers (a rank's function runs there under both launchers).
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._note)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
        pending, self._pending = self._pending, None
        if pending is not None and exc[0] is None:
            pending()  # every rank started it: finish it before Horovod shuts down

    def _note(self, signum, frame) -> None:
        # Nothing else here: the main thread may be inside a lock (the log channel's) the handler would need.
        if self.signalled_at is None:
            self.signalled_at = time.time()

    def requested(self) -> float | None:
        """A collective, called after every step: the (mean) time of the SIGTERMs the ranks had noted when the
        sum that ran beside this step started, the same on every rank, or None; starts the next sum when due."""
        self._steps += 1
        signalled_at = None
        if self._pending is not None:
            count, at, steps = self._pending().tolist()
            self._pending, self._skip = None, int(steps) - 1
            signalled_at = at / count if count else None
        if self._skip > 0:
            self._skip -= 1
        else:
            self._start()
        return signalled_at

    def _start(self) -> None:
        now = time.perf_counter()
        seconds_per_step = max(now - self._started, 1e-9) / self._steps
        self._started, self._steps = now, 0
        # Rank 0 says after how many steps the next sum starts; the others add nothing to that number.
        every = max(1, round(AGREE_SECONDS / seconds_per_step)) if distributed.rank() == 0 else 0
        signalled = self.signalled_at is not None
        mine = [float(signalled), self.signalled_at if signalled else 0.0, float(every)]
        self._pending = distributed.start_allreduce_sum(torch.tensor(mine, dtype=torch.float64), "preemption")
