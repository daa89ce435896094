"""SIGTERM as a request to stop after the current step, agreed by every rank, with a checkpoint there.

Spot reclaims, Kubernetes evictions and Spark's executor decommissioning send SIGTERM and leave a grace
period before the kill; dying at once would lose the work since the last checkpoint. While a rank trains,
SIGTERM only notes the time; the ranks sum what they noted (one all-reduce of two numbers) in Horovod's
background thread while the next step computes, so every rank learns of a request one step later, after
the same step, writes one checkpoint and stops (a blocking sum would add a wait for every rank to every step).
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Callable

import torch

from sparkml_par.train import distributed


class Preemption:
    """Holds the SIGTERM handler while training runs (the process's own handler comes back on exit)."""

    def __init__(self) -> None:
        self.signalled_at: float | None = None  # time.time() of this rank's SIGTERM
        self._previous = None
        self._pending: Callable[[], torch.Tensor] | None = None

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
        """A collective, called after every step: the (mean) time of the SIGTERMs the ranks had noted by the
        previous call, the same on every rank, or None; starts the sum of what they noted by now."""
        count, at = self._pending().tolist() if self._pending is not None else (0.0, 0.0)
        signalled = self.signalled_at is not None
        mine = torch.tensor([float(signalled), self.signalled_at if signalled else 0.0], dtype=torch.float64)
        self._pending = distributed.start_allreduce_sum(mine, "preemption")
        return at / count if count else None
