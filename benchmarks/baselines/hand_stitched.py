"""End-to-end baseline C: the stack a user stitches by hand from the standard parts.

petastorm's `make_spark_converter` caches the prepared train split as Parquet, pyspark's
`TorchDistributor(num_processes=N, local_mode=True)` runs torch DistributedDataParallel (gloo) over the
converter's loader, and `predict_batch_udf` scores the test split back in Spark. From a fresh process to
written predictions, as `sparkml-par run` is timed; the same raw Parquet input, MLP, optimizer, global
batch and epochs. Runs in the project's environment (pyspark, petastorm, torch) without importing it.

    .venv/bin/python benchmarks/baselines/hand_stitched.py --request '{"input": ..., "workdir": ..., ...}'

Prints one line `RESULT <json>`: seconds per stage (start-up, prepare, train, score), total seconds from
the process's start and the test accuracy.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from baseline_session import build_session

STARTED = time.perf_counter()


def mlp(in_features: int, classes: int, hidden: list[int]):
    import torch

    layers, width = [], in_features
    for size in hidden:
        layers += [torch.nn.Linear(width, size), torch.nn.ReLU()]
        width = size
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, classes))


def read_splits(spark, request: dict):
    """(train, test, number of features) of the raw input as a user reads it, a seeded 80/20 random split:
    a Parquet file's columns but `label` as one float array, or a CSV through a Spark ML pipeline."""
    from pyspark.sql import functions as F

    if "csv" in request:
        return tabular_splits(spark, request)
    raw = spark.read.parquet(request["input"])
    feature_columns = [c for c in raw.columns if c != "label"]
    rows = raw.select(F.array(*[F.col(c).cast("float") for c in feature_columns]).alias("features"), "label")
    train, test = rows.randomSplit([0.8, 0.2], seed=request["seed"])
    return train, test, len(feature_columns)


def csv_schema(columns: list[list[str]]):
    """The declared schema of a CSV whose columns are [name, "number" | "text"] in file order."""
    from pyspark.sql.types import DoubleType, StringType, StructField, StructType

    return StructType([StructField(name, DoubleType() if kind == "number" else StringType()) for name, kind in columns])


def tabular_splits(spark, request: dict):
    """A CSV read with its declared schema, rows without a label dropped, split 80/20; a Spark ML Pipeline
    (Imputer with medians, StringIndexer + OneHotEncoder, VectorAssembler, StandardScaler) fitted on train
    makes the features of both splits."""
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import Imputer, OneHotEncoder, StandardScaler, StringIndexer, VectorAssembler
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    spec = request["csv"]
    numeric, text, label = spec["numeric"], spec["text"], spec["label"]
    raw = spark.read.csv(request["input"], header=True, schema=csv_schema(spec["columns"]))
    train, test = raw.where(F.col(label).isNotNull()).randomSplit([0.8, 0.2], seed=request["seed"])
    imputed, indexed, encoded = (
        [f"{c}_{step}" for c in cols] for step, cols in (("imputed", numeric), ("index", text), ("onehot", text))
    )
    model = Pipeline(
        stages=[
            Imputer(inputCols=numeric, outputCols=imputed, strategy="median"),
            StringIndexer(inputCols=text, outputCols=indexed, handleInvalid="keep"),
            OneHotEncoder(inputCols=indexed, outputCols=encoded, handleInvalid="keep"),
            VectorAssembler(inputCols=imputed + encoded, outputCol="assembled"),
            StandardScaler(inputCol="assembled", outputCol="scaled", withMean=True, withStd=True),
        ]
    ).fit(train)

    def featurized(rows):
        out = model.transform(rows)
        return out.select(
            vector_to_array("scaled", "float32").alias("features"), F.col(label).cast("long").alias("label")
        )

    size = model.transform(train.limit(0)).schema["scaled"].metadata["ml_attr"]["num_attrs"]
    return featurized(train), featurized(test), size


def written_accuracy(spark, path: str) -> float:
    """The test accuracy of the predictions written at path (columns prediction and label)."""
    from pyspark.sql import functions as F

    scored = spark.read.parquet(path)
    return scored.agg(F.avg((F.col("prediction") == F.col("label")).cast("double"))).first()[0]


def serve(run) -> int:
    """The command line of a baseline script: --request JSON in, `RESULT <json>` out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--request", required=True, help="JSON: input, workdir, num_proc, epochs, batch_size, ...")
    result = run(json.loads(parser.parse_args().request))
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def train_ddp(converter, request: dict) -> None:
    """Runs in each TorchDistributor process: DDP over this rank's shard of the converter's loader; rank 0
    saves the model."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(request["seed"])
    model = torch.nn.parallel.DistributedDataParallel(mlp(request["features"], request["classes"], request["hidden"]))
    optimizer = torch.optim.Adam(model.parameters(), lr=request["lr"] * size)
    batch = request["batch_size"] // size
    steps = len(converter) // request["batch_size"]
    loss_fn = torch.nn.CrossEntropyLoss()
    with converter.make_torch_dataloader(
        batch_size=batch, cur_shard=rank, shard_count=size, num_epochs=None, workers_count=1
    ) as loader:
        batches = iter(loader)
        for _ in range(request["epochs"]):
            for _ in range(steps):
                b = next(batches)
                optimizer.zero_grad()
                loss = loss_fn(model(b["features"].float()), b["label"].long())
                loss.backward()
                optimizer.step()
    if rank == 0:
        torch.save(model.module.state_dict(), request["model_path"])
    dist.destroy_process_group()


def run(request: dict) -> dict:
    from petastorm.spark import SparkDatasetConverter, make_spark_converter
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql.types import LongType

    workdir = request["workdir"]
    spark = build_session(request["num_proc"], "hand-stitched")
    spark.conf.set(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF, f"file://{workdir}/converter-cache")
    times = {"start-up": time.perf_counter() - STARTED}

    mark = time.perf_counter()
    train, test, features = read_splits(spark, request)
    # One Parquet file (row group) per partition: every rank needs a row group of its own.
    converter = make_spark_converter(train.repartition(request["num_proc"]))
    times["prepare"] = time.perf_counter() - mark

    mark = time.perf_counter()
    request = {**request, "features": features, "model_path": f"{workdir}/model.pt"}
    TorchDistributor(num_processes=request["num_proc"], local_mode=True, use_gpu=False).run(
        train_ddp, converter, request
    )
    times["train"] = time.perf_counter() - mark

    mark = time.perf_counter()

    def make_predict():
        import numpy as np
        import torch

        model = mlp(request["features"], request["classes"], request["hidden"])
        model.load_state_dict(torch.load(request["model_path"]))
        model.eval()

        def predict(features: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return model(torch.from_numpy(features.astype(np.float32))).argmax(1).numpy()

        return predict

    classify = predict_batch_udf(
        make_predict, return_type=LongType(), batch_size=1024, input_tensor_shapes=[[request["features"]]]
    )
    test.withColumn("prediction", classify("features")).drop("features").write.parquet(f"{workdir}/predictions")
    accuracy = written_accuracy(spark, f"{workdir}/predictions")
    times["score"] = time.perf_counter() - mark
    converter.delete()
    spark.stop()
    return {"stage_seconds": times, "seconds": time.perf_counter() - STARTED, "accuracy": accuracy}


if __name__ == "__main__":
    sys.exit(serve(run))
