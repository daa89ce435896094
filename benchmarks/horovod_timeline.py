"""Horovod's timeline read back: how long each phase of each collective took, as rank 0 saw it.

With HOROVOD_TIMELINE naming a file, rank 0 writes a Chrome trace: one track per tensor name, on it the
negotiation (NEGOTIATE_ALLREDUCE: from the first rank's request until every rank's is in) and then the
operation (ALLREDUCE) with its activities nested inside (QUEUE, MEMCPY_IN_FUSION_BUFFER, GLOO_ALLREDUCE,
MEMCPY_OUT_FUSION_BUFFER). The benchmarks quote these phases to say where a collective's time goes:
in Horovod's coordination and copies, or in Gloo's own all-reduce.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path


def phase_durations(path: Path) -> dict[str, dict[str, list[float]]]:
    """Milliseconds of every begin/end phase per tensor track ("allreduce.<name>"), in trace order.

    Horovod leaves the trace's JSON array open while it runs and closes it at shutdown; both read. A
    phase whose end comes without its begin (a barrier's negotiation ends twice) is left out.
    """
    if not path.exists():
        raise FileNotFoundError(
            f"Horovod wrote no timeline to {path}: rank 0 opens HOROVOD_TIMELINE at hvd.init(), and Horovod "
            "0.28.1 opens none in a Python worker that had a timeline before; record one timeline per process"
        )
    text = path.read_text().rstrip().rstrip(",")
    events = json.loads(text if text.endswith("]") else text + "]")
    tracks: dict[int, str] = {}
    open_phases: dict[int, list[tuple[str, float]]] = defaultdict(list)
    durations: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for event in events:
        track = event.get("pid")
        if event["ph"] == "M" and event["name"] == "process_name" and "name" in event["args"]:
            tracks[track] = event["args"]["name"]
        elif event["ph"] == "B":
            open_phases[track].append((event["name"], event["ts"]))
        elif event["ph"] == "E" and open_phases[track]:
            name, began = open_phases[track].pop()
            durations[tracks.get(track, str(track))][name].append((event["ts"] - began) / 1000)
    return {track: dict(phases) for track, phases in durations.items()}


def median_phases(durations: dict[str, dict[str, list[float]]], track: str, skip: int = 0) -> dict[str, float]:
    """Median milliseconds of each phase on one track of `phase_durations`' result, leaving out its first
    `skip` occurrences (warm-up)."""
    phases = durations.get(track)
    if not phases:
        raise ValueError(f"the Horovod timeline has no track {track!r}; its tracks: {sorted(durations)}")
    return {name: statistics.median(times[skip:] or times) for name, times in phases.items()}
