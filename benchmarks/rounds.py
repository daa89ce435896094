"""Compared runs in rounds whose order rotates: on this shared two-core machine the place a run takes in a
round moves its figure (benchmarks.launch: whichever of two Horovod all-reduce blocks ran last in every
round measured faster, 64 MB 1.78 against 1.17 GB/s one way round, 1.43 against 1.19 the other)."""

from __future__ import annotations

from typing import Any, Callable


def rotating_rounds(runs: dict[str, Callable[[], Any]], rounds: int, title: str = "") -> dict[str, list]:
    """Each run's results over `rounds` rounds; round i starts i places further along `runs`, so each run
    takes every place in a round in turn."""
    names = list(runs)
    results: dict[str, list] = {name: [] for name in names}
    for i in range(rounds):
        if title:
            print(f"{title} round {i + 1}/{rounds} ...", flush=True)
        start = i % len(names)
        for name in names[start:] + names[:start]:
            results[name].append(runs[name]())
    return results
