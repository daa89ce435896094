"""Ranks as local processes on the driver: for a notebook without executors, and for debugging.

Same rank plan, same environment variables and the same rank wrapper as the barrier launcher, all
bound to loopback.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from typing import Any

import cloudpickle

from sparkml_par.launch.rank import RankSpec, run_rank
from sparkml_par.launch.rank_plan import RankSlot, build_rank_plan

LOOPBACK = "127.0.0.1"


def _rank_main(spec_bytes: bytes, plan: list[RankSlot], task: int, results) -> None:
    spec: RankSpec = cloudpickle.loads(spec_bytes)
    rank = plan[task].rank
    try:
        value = run_rank(spec, plan, task, LOOPBACK)
    except Exception as exc:
        results.put((rank, False, str(exc)))
        raise SystemExit(1) from None
    results.put((rank, True, cloudpickle.dumps(value)))


class LocalJob:
    def __init__(self, spec: RankSpec, num_proc: int):
        plan = build_rank_plan([LOOPBACK] * num_proc)
        context = multiprocessing.get_context("spawn")
        self._results = context.Queue()
        self._collected: dict[int, tuple[bool, Any]] = {}
        spec_bytes = cloudpickle.dumps(spec)
        self._processes = [
            context.Process(
                target=_rank_main,
                name=f"sparkml_par-rank-{slot.rank}",
                daemon=True,
                args=(spec_bytes, plan, slot.task, self._results),
            )
            for slot in plan
        ]
        for process in self._processes:
            process.start()

    def _drain(self, block_seconds: float = 0.0) -> None:
        while len(self._collected) < len(self._processes):
            try:
                rank, ok, payload = (
                    self._results.get(timeout=block_seconds) if block_seconds else self._results.get_nowait()
                )
            except queue.Empty:
                return
            self._collected[rank] = (ok, payload)

    def wait(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        self._drain()
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
        self._drain()
        return not any(p.is_alive() for p in self._processes)

    def cancel(self) -> None:
        for process in self._processes:
            if process.is_alive():
                process.terminate()
        for process in self._processes:
            process.join(5)
            if process.is_alive():
                process.kill()

    def result(self) -> list[Any]:
        # A rank's result can still be in the pipe after its process exited.
        self._drain(block_seconds=5.0)
        failed = [(p.name, p.exitcode) for p in self._processes if p.exitcode != 0]
        if failed or len(self._collected) != len(self._processes):
            errors = [payload for ok, payload in self._collected.values() if not ok]
            raise RuntimeError(f"local ranks exited abnormally {failed}: {' | '.join(errors)}")
        return [cloudpickle.loads(self._collected[rank][1]) for rank in sorted(self._collected)]
