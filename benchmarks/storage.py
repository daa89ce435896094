"""Checkpoint I/O through the project's store: a local disk next to S3 (a loopback moto server), per epoch.

    .venv/bin/python -m benchmarks.storage                    # a 100 MB checkpoint, median of 3
    .venv/bin/python -m benchmarks.storage --mb 100 --reps 3

Training writes one checkpoint per epoch with train.checkpoint_every=1 (the default), at train.output,
which may be a local path or an s3:// URL; this part measures what that costs on each. The state is shaped
like a real checkpoint, {"fingerprint": {...}, "model": {"w": float32 tensor of --mb MB}}, and goes
through exactly the trainer's calls:

- write: `sparkml_par.train.checkpoint.write_checkpoint_atomically(url, epoch, state, keep)` with the
  trainer's keep (train.keep_checkpoints): torch.save into memory, the store's complete-or-absent write
  (a hidden sibling, fsync and rename on a local disk; one whole upload under the final name on S3), then
  the listing and pruning of older checkpoints. Each repetition writes the next epoch, as training does.
- read: `load_latest_checkpoint(url, fingerprint)`, what a resume does: list, read the newest whole,
  torch.load(weights_only=True), compare the fingerprint. Every read is checked against the state
  written (not timed).

The two sides: a fresh temporary directory (tempfile's, on whatever disk holds it; the reads find the file
in the page cache, as a resume on the same machine would) and a bucket of moto's S3 server on 127.0.0.1,
which the store reaches through AWS_ENDPOINT_URL, as any S3-compatible server. The server runs in threads
of this process: its Python request handling shares the interpreter and the cores with the writer, and no
network lies between them, so S3's figures are the protocol's and the server's cost, not a cloud's. The
store reads an object whole through a random-access file (a few requests; pyarrow 14's input stream would
fetch it in 256 kB ranges, which moto answers by copying the whole object each time: 26 s for 100 MB).
One untimed write and read per side comes first (the S3 client connects, the files and buffers warm),
then --reps repetitions, interleaved (write local, write S3, read local, read S3) so both sides share the
machine's noise; the median counts. The ratio column is S3 / local disk, and the last row, the per-epoch
overhead of S3, is the difference of the medians of the writes: with train.checkpoint_every=1 an epoch
checkpoints once, so that is what S3 adds to each epoch (rank 0 writes; the other ranks wait for it at
the next collective). Memory: the process plays rank 0, and its peak includes the state, torch.save's
serialized copy, the bytes read back and the server's buffers. No target: the figures are reported.
Prints one table and writes benchmarks/results/storage.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks import entry
from benchmarks.memory import PeakMemory
from benchmarks.table import print_table, result_row

RESULTS_PATH = Path(__file__).resolve().parent / "results" / "storage.json"
BUCKET = "bench-storage"
FINGERPRINT = {"model": "bench"}
BYTES_PER_MB = 1_000_000
FLOAT32_BYTES = 4
# What the store and botocore read; set before the first s3:// Store, which caches its filesystem per bucket.
S3_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    # No instance-metadata lookups on a machine that is not in a cloud.
    "AWS_EC2_METADATA_DISABLED": "true",
}
SIDES = ("local", "s3")
LOCAL = "local disk"


def make_state(mb: float) -> dict[str, Any]:
    """A checkpoint's shape: a fingerprint and a model state of --mb MB of float32 (seeded, incompressible)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    elements = max(1, int(mb * BYTES_PER_MB) // FLOAT32_BYTES)
    return {"fingerprint": FINGERPRINT, "model": {"w": torch.randn(elements, generator=generator)}}


def start_s3() -> tuple[Any, str]:
    """moto's server on a free loopback port, the environment pointing at it, and the bucket; (server, endpoint)."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)  # port 0: the system picks one
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    os.environ.update(S3_ENVIRONMENT, AWS_ENDPOINT_URL=endpoint)
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
    return server, endpoint


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn(*args)
    return time.perf_counter() - started, value


def _check(loaded: dict | None, epoch: int, state: dict[str, Any], url: str) -> None:
    """The checkpoint read back is the one written last, bit for bit."""
    import torch

    if loaded is None or loaded.get("epoch") != epoch or not torch.equal(loaded["model"]["w"], state["model"]["w"]):
        found = "nothing" if loaded is None else f"epoch {loaded.get('epoch')!r}"
        raise SystemExit(f"storage benchmark: read back {found} from {url}, not the epoch {epoch} just written")


def measure(urls: dict[str, str], state: dict[str, Any], reps: int, keep: int) -> dict[str, dict[str, list[float]]]:
    """Seconds of every timed write and read, per side; epoch 0 is the untimed warm-up."""
    from sparkml_par.train.checkpoint import load_latest_checkpoint, write_checkpoint_atomically

    times: dict[str, dict[str, list[float]]] = {kind: {side: [] for side in SIDES} for kind in ("write", "read")}
    for epoch in range(reps + 1):
        for side in SIDES:
            seconds, _ = _timed(write_checkpoint_atomically, urls[side], epoch, state, keep)
            if epoch:
                times["write"][side].append(seconds)
        for side in SIDES:
            seconds, loaded = _timed(load_latest_checkpoint, urls[side], FINGERPRINT)
            _check(loaded, epoch, state, urls[side])
            del loaded  # free the copy before the next write
            if epoch:
                times["read"][side].append(seconds)
    return times


def _size(store: Any, name: str) -> int:
    return store.fs.get_file_info(f"{store.root}/{name}").size


def run(args: argparse.Namespace) -> list[dict]:
    """Measures both sides and returns the table's rows; the full record goes to args.json."""
    import torch

    from sparkml_par.config import TrainConfig
    from sparkml_par.io.store import Store

    keep = TrainConfig().keep_checkpoints
    with PeakMemory() as memory, tempfile.TemporaryDirectory(prefix="sparkml_par-bench-storage-") as directory:
        state = make_state(args.mb)
        state_bytes = state["model"]["w"].numel() * state["model"]["w"].element_size()
        server, endpoint = start_s3()
        try:
            urls = {"local": str(Path(directory) / "checkpoints"), "s3": f"s3://{BUCKET}/checkpoints"}
            times = measure(urls, state, args.reps, keep)
            # Every stream the store opened was closed by its `with`; the names show what a run leaves behind.
            left = {side: Store(url).names() for side, url in urls.items()}
            file_bytes = {side: _size(Store(url), f"checkpoint-{args.reps:05d}.pt") for side, url in urls.items()}
        finally:
            server.stop()

    median = {kind: {side: statistics.median(v) for side, v in by_side.items()} for kind, by_side in times.items()}
    overhead = median["write"]["s3"] - median["write"]["local"]
    peaks = {"driver_peak_mb": memory.driver_mb, "rank_peak_mb": memory.python_mb}

    def versus(kind: str) -> dict:  # S3 as "this project", the local disk as its baseline: the ratio is S3 / local
        return result_row(f"storage: checkpoint {kind} (s)", median[kind]["s3"], median[kind]["local"], LOCAL, "lower")

    table = [
        versus("write") | peaks,
        versus("read") | peaks,
        result_row("storage: per-epoch overhead of S3 over local disk (s)", overhead, None, "", "lower") | peaks,
    ]
    record: dict[str, Any] = {
        "settings": {"mb": args.mb, "reps": args.reps, "keep": keep, "torch_threads": torch.get_num_threads()},
        "state_bytes": state_bytes,
        "checkpoint_file_bytes": file_bytes,
        "urls": urls,
        "s3_endpoint": endpoint,
        "files_left": left,
        "seconds": times,
        "median_seconds": median,
        "per_epoch_overhead_s3_seconds": overhead,
        "rows": table,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=1))
    print_report(table, record)
    print(f"\nwritten: {args.json}")
    return table


def print_report(rows: list[dict], record: dict) -> None:
    print_table(rows)
    s, median = record["settings"], record["median_seconds"]
    mb = record["checkpoint_file_bytes"]["local"] / BYTES_PER_MB
    print(
        f"\na {mb:.1f} MB checkpoint file ({record['state_bytes'] / BYTES_PER_MB:.1f} MB of float32), keep "
        f"{s['keep']}; median of {s['reps']} interleaved repetitions after one warm-up each; S3 is moto on "
        f"{record['s3_endpoint']} in this process. An epoch checkpoints once (train.checkpoint_every=1)."
    )
    rates = [
        f"{kind} {side} {seconds:.3f} ({record['checkpoint_file_bytes'][side] / BYTES_PER_MB / seconds:.0f} MB/s)"
        for kind in ("write", "read")
        for side, seconds in median[kind].items()
    ]
    print("median seconds: " + ", ".join(rates))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.storage", description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100, help="size of the checkpoint's model state, MB of float32")
    parser.add_argument("--reps", type=int, default=3, help="interleaved timed writes and reads per side")
    parser.add_argument("--json", type=Path, default=RESULTS_PATH, help="where to write the results")
    return parser


def _resolve(args: argparse.Namespace) -> str | None:
    if not args.mb > 0 or args.reps < 1:
        return "--mb must be positive and --reps at least 1"
    return None


def main(argv: list[str] | None = None) -> int:
    return entry.main(argv, build_parser, run, _resolve)


if __name__ == "__main__":
    sys.exit(main())
