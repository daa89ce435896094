"""The artifact's predictor over a DataFrame's Arrow batches (`mapInArrow`), in the Python workers.

pyspark's `predict_batch_udf` converts every output row through pandas and a per-row Python
converter and stacks its inputs row by row; for a small model that conversion and stacking cost the
worker more than the model does.
Here features leave Arrow as one flat float32 buffer and probabilities return as one, so the worker
spends its time in the model. The closure holds plain values only; each worker builds its predictor
once, on the GPU Spark gave its task when there is one (predictor.cached_predictor).
"""

from __future__ import annotations

from typing import Any

from sparkml_par.contract import PREDICTION, PROBABILITIES
from sparkml_par.infer.predictor import input_size


def output_schema(df, carried: list[str], task: str):
    """The carried columns as they are, then prediction (class index or value) and, for classes, probabilities."""
    from pyspark.sql.types import ArrayType, FloatType, LongType, StructField, StructType

    fields = [df.schema[c] for c in carried]
    if task == "classification":
        return StructType(
            fields + [StructField(PREDICTION, LongType()), StructField(PROBABILITIES, ArrayType(FloatType()))]
        )
    return StructType(fields + [StructField(PREDICTION, FloatType())])


def predict_batches(artifact_dir: str, description: dict[str, Any], features: str, carried: list[str], batch_size: int):
    """The function mapInArrow runs: each Arrow batch's carried columns plus the model's outputs."""
    size = input_size(description)

    def predict(batches):
        import numpy as np
        import pyarrow as pa
        import torch

        from sparkml_par.infer.predictor import cached_predictor, task_device
        from sparkml_par.spark_runtime.python_worker import prepare_worker

        # Spark runs one Python worker per task slot: more torch threads would only compete for its cores.
        torch.set_num_threads(1)
        predictor = cached_predictor(artifact_dir, task_device())
        prepare_worker()  # after the model's first load, whose imports are then frozen too
        for batch in batches:
            if batch.num_rows == 0:
                continue
            # Rows were checked to hold exactly `size` values (inputs.checked_features): one flat buffer.
            flat = batch.column(features).flatten().to_numpy(zero_copy_only=False)
            outputs = predictor.predict_batches(
                flat.astype(np.float32, copy=False).reshape(batch.num_rows, size), batch_size
            )
            columns = [batch.column(c) for c in carried] + [pa.array(outputs[PREDICTION])]
            names = [*carried, PREDICTION]
            if PROBABILITIES in outputs:
                probabilities = outputs[PROBABILITIES]
                offsets = np.arange(0, probabilities.size + 1, probabilities.shape[1], dtype=np.int32)
                columns.append(pa.ListArray.from_arrays(offsets, pa.array(probabilities.reshape(-1))))
                names.append(PROBABILITIES)
            yield pa.RecordBatch.from_arrays(columns, names=names)

    return predict
