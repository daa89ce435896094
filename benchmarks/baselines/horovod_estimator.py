"""End-to-end baseline B: Horovod's own Spark estimator, `horovod.spark.torch.TorchEstimator`.

The estimator takes the prepared DataFrame and a `LocalStore`, writes its own petastorm copy of the
data, trains with Horovod on num_proc Spark tasks, and returns a Spark model whose `transform` scores
the test split. From a fresh process to written predictions, as `sparkml-par run` is timed; the same raw
Parquet input, MLP, optimizer, global batch and epochs. Runs in the project's environment (which has
Horovod built with Spark support) with tensorboard, which the estimator imports, on PYTHONPATH.

    .venv/bin/python benchmarks/baselines/horovod_estimator.py --request '{"input": ..., "workdir": ..., ...}'

Prints one line `RESULT <json>`: seconds per stage (start-up, prepare, train, score), total seconds from
the process's start and the test accuracy.
"""

from __future__ import annotations

import sys
import time

from baseline_session import build_session
from hand_stitched import mlp, read_splits, serve, written_accuracy

STARTED = time.perf_counter()


def legacy_dataset_store(prefix: str):
    """Horovod 0.28.1's LocalStore with its one pyarrow >= 13 incompatibility adapted: the estimator reads the
    row counts through the legacy ParquetDataset API (`schema.to_arrow_schema()`, `pieces`), which pyarrow
    14 still has but no longer returns by default."""
    import pyarrow.parquet as pq
    from horovod.spark.common.store import LocalStore

    class LegacyDatasetStore(LocalStore):
        def get_parquet_dataset(self, path):
            return pq.ParquetDataset(self.get_localized_path(path), filesystem=self.fs, use_legacy_dataset=True)

    return LegacyDatasetStore(prefix)


def run(request: dict) -> dict:
    import torch
    from horovod.spark.torch import TorchEstimator
    from pyspark.sql import functions as F

    workdir = request["workdir"]
    spark = build_session(request["num_proc"], "horovod-estimator")
    times = {"start-up": time.perf_counter() - STARTED}

    mark = time.perf_counter()
    train, test, features = read_splits(spark, request)
    times["prepare"] = time.perf_counter() - mark

    mark = time.perf_counter()
    torch.manual_seed(request["seed"])
    model = mlp(features, request["classes"], request["hidden"])
    estimator = TorchEstimator(
        num_proc=request["num_proc"],
        store=legacy_dataset_store(f"{workdir}/store"),
        model=model,
        optimizer=torch.optim.Adam(model.parameters(), lr=request["lr"] * request["num_proc"]),
        # The estimator hands labels over as float; cross entropy takes class indices.
        loss=lambda output, label: torch.nn.functional.cross_entropy(output, label.long()),
        input_shapes=[[-1, features]],
        feature_cols=["features"],
        label_cols=["label"],
        batch_size=request["batch_size"] // request["num_proc"],
        epochs=request["epochs"],
        verbose=0,
    )
    # One Parquet file (row group) per partition: every rank needs a row group of its own.
    fitted = estimator.fit(train.repartition(request["num_proc"]))
    times["train"] = time.perf_counter() - mark

    mark = time.perf_counter()
    predicted = fitted.transform(test)
    argmax = F.udf(lambda logits: int(max(range(len(logits)), key=logits.__getitem__)), "long")
    predicted.select("label", argmax(F.col("label__output")).alias("prediction")).write.parquet(
        f"{workdir}/predictions"
    )
    accuracy = written_accuracy(spark, f"{workdir}/predictions")
    times["score"] = time.perf_counter() - mark
    spark.stop()
    return {"stage_seconds": times, "seconds": time.perf_counter() - STARTED, "accuracy": accuracy}


if __name__ == "__main__":
    sys.exit(serve(run))
