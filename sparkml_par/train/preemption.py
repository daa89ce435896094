"""SIGTERM as a request to stop after the current step, agreed by every rank, with a checkpoint there.

Spot reclaims, Kubernetes evictions and Spark's executor decommissioning send SIGTERM and leave a grace
period before the kill; dying at once would lose the work since the last checkpoint. While a rank trains,
SIGTERM only notes the time; after every optimizer step the ranks sum what they noted (one all-reduce of
two numbers), so all of them see the request after the same step, write one checkpoint and stop.
"""

from __future__ import annotations

import signal
import threading
import time

import torch

from sparkml_par.train import distributed


class Preemption:
    """Holds the SIGTERM handler while training runs (the process's own handler comes back on exit)."""

    def __init__(self) -> None:
        self.signalled_at: float | None = None  # time.time() of this rank's SIGTERM
        self._previous = None

    def __enter__(self) -> "Preemption":
        # Only a process's main thread may set handlers (a rank's function runs there under both launchers).
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._note)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _note(self, signum, frame) -> None:
        # Nothing else here: the main thread may be inside a lock (the log channel's) the handler would need.
        if self.signalled_at is None:
            self.signalled_at = time.time()

    def requested(self) -> float | None:
        """A collective: when any rank was sent SIGTERM, the (mean) time it was, on every rank; else None."""
        signalled = self.signalled_at is not None
        mine = torch.tensor([float(signalled), self.signalled_at if signalled else 0.0], dtype=torch.float64)
        count, at = distributed.allreduce_sum(mine, "preemption").tolist()
        return at / count if count else None
