"""Preparing a folder of PNG images: how long it takes next to decoding the same files once, and how
many times each image is decoded.

    .venv/bin/python -m benchmarks.prepare_images                   # 800 images, 32 x 32
    .venv/bin/python -m benchmarks.prepare_images --per-class 20

The input is scikit-learn's handwritten digits (real 8x8 scans) saved as grayscale PNGs upscaled to
32 x 32, one folder per class, written once and not timed. In one session (its JVM and Python workers
warmed first by a prepare of 200 of the images, copied to a folder of their own):
- the baseline: one pass of the project's image reader over the files (Spark's binaryFile source and
  the decode UDF, `data_prep.ingest`), written to Spark's noop sink: every image decoded once;
- `data_prep.job.prepare` of the folder (source: images): validate with quarantine, duplicates, profile,
  the three petastorm writes.
The decodes are the rows that came out of the decode UDF's operator (Spark's own SQL metric "number of
output rows" of each ArrowEvalPython node, summed over the session's queries, read from Spark's SQL
status store once its listener bus has caught up): one per image means prepare reads the decoded rows
from its cache instead of decoding again for each Spark job. Writes benchmarks/results/prepare_images.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import entry
from benchmarks.memory import PeakMemory
from benchmarks.table import print_table, result_row

RESULTS_PATH = Path(__file__).resolve().parent / "results" / "prepare_images.json"
SIZE = 32
DECODE_NODE = "ArrowEvalPython"
OUTPUT_ROWS = "number of output rows"
# How long to wait for Spark's listener bus to deliver the last queries' metrics.
LISTENER_TIMEOUT_MS = 60_000


def write_images(directory: Path, per_class: int) -> int:
    """per_class digits of each class as PNG files under directory/<class>/; returns how many."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    written = 0
    for label in range(10):
        folder = directory / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        for i, index in enumerate(np.flatnonzero(digits.target == label)[:per_class]):
            pixels = (digits.images[index] * (255 / 16)).astype(np.uint8)
            Image.fromarray(pixels).resize((SIZE, SIZE), Image.BICUBIC).save(folder / f"{i}.png")
            written += 1
    return written


def image_config(images: Path, output: Path):
    from sparkml_par.config import load_config

    return load_config(
        None,
        [
            "data.source=images",
            f"data.path={images}",
            f"data.image_size=[{SIZE}, {SIZE}]",
            f"data.output={output}",
            "data.mode=overwrite",
        ],
    ).data


def decoded_rows(spark) -> int:
    """Rows out of every decode operator in the session's SQL queries so far, from Spark's SQL status store."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(LISTENER_TIMEOUT_MS)
    store = spark._jsparkSession.sharedState().statusStore()
    total = 0
    executions = store.executionsList().iterator()
    while executions.hasNext():
        execution = executions.next().executionId()
        values = store.executionMetrics(execution)
        accumulators = set()  # a node the plan shows twice (a cached relation read twice) counts once
        nodes = store.planGraph(execution).allNodes().iterator()
        while nodes.hasNext():
            node = nodes.next()
            if node.name() != DECODE_NODE:
                continue
            metrics = node.metrics().iterator()
            while metrics.hasNext():
                metric = metrics.next()
                if metric.name() == OUTPUT_ROWS:
                    accumulators.add(metric.accumulatorId())
        for accumulator in accumulators:
            value = values.get(accumulator)
            if not value.isEmpty():
                total += int(value.get().replace(",", ""))
    return total


def run(args: argparse.Namespace) -> list[dict]:
    from data_prep.ingest import ingest
    from data_prep.job import prepare
    from sparkml_par.config import load_config
    from sparkml_par.spark_runtime.session import spark_session

    with tempfile.TemporaryDirectory(prefix="prepare-images-bench-") as tmp, PeakMemory() as memory:
        work = Path(tmp)
        files = write_images(work / "images", args.per_class)
        write_images(work / "warm-up", 20)
        with spark_session(load_config(None, []).spark) as spark:
            prepare(spark, image_config(work / "warm-up", work / "warm-up-dataset"))
            started = time.perf_counter()
            ingest(spark, image_config(work / "images", work / "unused")).df.write.format("noop").mode(
                "overwrite"
            ).save()
            once = time.perf_counter() - started
            before = decoded_rows(spark)
            started = time.perf_counter()
            result = prepare(spark, image_config(work / "images", work / "dataset"))
            seconds = time.perf_counter() - started
            decodes = decoded_rows(spark) - before
        if result.skipped or result.manifest["rows_in"] != files:
            raise RuntimeError(f"prepare read {result.manifest['rows_in']} images, not {files}, or was skipped")
    print(f"  {files} images: decoded once in {once:.1f} s; prepared in {seconds:.1f} s with {decodes} decodes")
    rows = [
        result_row(
            f"prepare of {files} PNG images, {SIZE} x {SIZE} (s)",
            seconds,
            once,
            "decoding them once in Spark",
            "lower",
        )
        | memory.columns(),
        result_row(
            f"image decodes per image in that prepare ({decodes} of {files} images)",
            decodes / files,
            1.0,
            "one decode per image",
            "lower",
            "<= 1.0x (decoded once)",
            1.0,
        ),
    ]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"images": files, "seconds": seconds, "decode_once_seconds": once, "decodes": decodes, "rows": rows})
        + "\n"
    )
    print_table(rows)
    print(f"\nwritten: {args.json}")
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.prepare_images", description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=80, help="images of each of the 10 classes (default 80)")
    parser.add_argument("--json", type=Path, default=RESULTS_PATH, help="where to write the results")
    return parser


def _resolve(args: argparse.Namespace) -> str | None:
    return (
        "--per-class must be between 20 and 174 (the rarest digit has 174 images)"
        if not 20 <= args.per_class <= 174
        else None
    )


def main(argv: list[str] | None = None) -> int:
    return entry.main(argv, build_parser, run, _resolve)


if __name__ == "__main__":
    sys.exit(main())
