"""Peak memory of a Spark driver and of its Python workers (where the Horovod ranks run), read from /proc.

    with PeakMemory() as memory:          # this process is the driver
        ...
    rows = [row | memory.columns() for row in rows]

Peak RSS (VmHWM in /proc/<pid>/status) only grows while a process lives, so every process only has to
be seen once before it ends; a background thread looks every `interval` seconds because Spark ends
Python workers that sat idle for a minute. In local mode the Spark JVM is a child of the driver's
Python process, named java, and Spark's Python workers (the ranks among them) run under that JVM.

- driver: the root process's peak plus its JVM's;
- workers: the largest peak of any process under that JVM; None when none ran.

Other children of the root are not counted: the baselines' processes (their own venv and JVM) and
plain torch processes are a baseline's memory, not this project's.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import psutil

KB_PER_MB = 1024


def peak_rss_kb(pid: int) -> int | None:
    """VmHWM of a live process in kB; None once it has ended (or for a kernel thread)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


class PeakMemory:
    """Samples the peaks of a driver process tree until the `with` block ends."""

    def __init__(self, root: int | None = None, interval: float = 0.5):
        if not Path("/proc/self/status").exists():
            raise RuntimeError("peak memory is read from /proc/<pid>/status: this needs Linux")
        self.root = os.getpid() if root is None else root
        self.interval = interval
        self._root_kb = 0
        self._jvm_kb: dict[int, int] = {}
        self._worker_kb: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="peak-memory", daemon=True)
        self._lock = threading.Lock()

    def __enter__(self) -> PeakMemory:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    @property
    def python_mb(self) -> float:
        """The root process alone (the driver's Python)."""
        return self._root_kb / KB_PER_MB

    @property
    def driver_mb(self) -> float:
        """The root process plus its Spark JVM."""
        return (self._root_kb + sum(self._jvm_kb.values())) / KB_PER_MB

    @property
    def workers_mb(self) -> float | None:
        return max(self._worker_kb.values()) / KB_PER_MB if self._worker_kb else None

    def columns(self) -> dict:
        """The memory columns of a benchmark table row."""
        return {"driver_peak_mb": self.driver_mb, "rank_peak_mb": self.workers_mb}

    def sample(self) -> None:
        """Reads the peaks once, now (also done every `interval` seconds inside the `with` block)."""
        try:
            jvms = [child for child in psutil.Process(self.root).children() if _is_java(child)]
        except psutil.NoSuchProcess:
            return
        with self._lock:
            self._root_kb = max(self._root_kb, peak_rss_kb(self.root) or 0)
            for jvm in jvms:
                _keep_max(self._jvm_kb, jvm.pid)
                try:
                    workers = jvm.children(recursive=True)
                except psutil.NoSuchProcess:
                    continue
                for worker in workers:
                    _keep_max(self._worker_kb, worker.pid)

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()


def _is_java(process: psutil.Process) -> bool:
    try:
        return process.name() == "java"
    except psutil.NoSuchProcess:
        return False


def _keep_max(peaks: dict[int, int], pid: int) -> None:
    kb = peak_rss_kb(pid)
    if kb is not None:
        peaks[pid] = max(peaks.get(pid, 0), kb)
