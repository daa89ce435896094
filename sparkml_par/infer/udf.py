"""The artifact's predictor as a Spark pandas UDF (pyspark's `predict_batch_udf`).

The UDF's closure holds plain values only (the artifact path and the feature count); each Python
worker builds its predictor once, on the GPU Spark gave its task when there is one, and Spark
feeds it `batch_size` rows per call. Spark's own per-worker cache keeps the predict function
between tasks; ours (predictor.cached_predictor) keeps the loaded model between UDFs of one artifact.
"""

from __future__ import annotations

from typing import Any

from sparkml_par.infer.predictor import PREDICTION, PROBABILITIES


def prediction_type(task: str):
    """Struct of the UDF's output: prediction (class index or value) and, for classes, probabilities.

    Fields are nullable because the pandas-to-Arrow conversion always declares them so (Spark checks).
    """
    from pyspark.sql.types import ArrayType, FloatType, LongType, StructField, StructType

    if task == "classification":
        return StructType([StructField(PREDICTION, LongType()), StructField(PROBABILITIES, ArrayType(FloatType()))])
    return StructType([StructField(PREDICTION, FloatType())])


def prediction_udf(artifact_dir: str, description: dict[str, Any], batch_size: int):
    """A UDF of one array<float> column of the model's input size, returning `prediction_type`."""
    from pyspark.ml.functions import predict_batch_udf

    from sparkml_par.infer.predictor import input_size

    return predict_batch_udf(_make_predict_fn(artifact_dir), return_type=prediction_type(description["task"]),
                             batch_size=batch_size, input_tensor_shapes=[[input_size(description)]])


def _make_predict_fn(artifact_dir: str):
    def make_predict_fn():
        import torch

        from sparkml_par.infer.predictor import cached_predictor, task_device

        # Spark runs one Python worker per task slot: more torch threads would only compete for its cores.
        torch.set_num_threads(1)
        return cached_predictor(artifact_dir, task_device()).predict

    return make_predict_fn
