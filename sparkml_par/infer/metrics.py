"""Evaluation of written predictions, aggregated by Spark: no prediction row reaches the driver.

Classification: one groupBy(label, prediction) count gives the confusion matrix (classes x classes
numbers), and accuracy and per-class precision and recall follow from it on the driver. Regression:
one aggregate gives MSE and MAE. Rows without a label are counted, not evaluated; labels that are no
class of the model (outside 0..classes-1, not an integer, an unknown class name) count as wrong
predictions and are reported.
"""

from __future__ import annotations

from typing import Any

from sparkml_par.contract import PREDICTION, column, quoted


def evaluate(predictions, label: str, task: str, num_classes: int, classes: list[str] | None = None) -> dict[str, Any]:
    if task == "classification":
        return classification_metrics(_pair_counts(predictions, label, classes), num_classes)
    return _regression(predictions, label)


def _pair_counts(predictions, label: str, classes: list[str] | None) -> dict[tuple[int | None, int], int]:
    """(class id of the label, prediction) -> rows. A label is a class id 0..K-1, or with named classes the
    name (as raw input has it) or its id (as a prepared split has it); anything else (1.5, a name the model
    does not know) becomes -1, an invalid label, never a truncated class."""
    from pyspark.sql import functions as F

    raw = column(label)
    number = F.expr(f"try_cast({quoted(label)} AS double)")
    class_id = F.when(number.isNotNull() & (number == F.floor(number)), number).otherwise(F.lit(-1.0))
    if classes:
        # pyspark 3.5's F.array_position takes a literal, not a column, as the value.
        position = F.call_function("array_position", F.array(*[F.lit(str(c)) for c in classes]), raw.cast("string"))
        class_id = F.when(position > 0, position - 1).otherwise(class_id)
    class_id = F.when(raw.isNotNull(), class_id.cast("long")).alias("_class_id")
    rows = predictions.groupBy(class_id, PREDICTION).count().collect()
    return {(None if r[0] is None else int(r[0]), int(r[PREDICTION])): int(r["count"]) for r in rows}


def classification_metrics(pair_counts: dict[tuple[int | None, int], int], num_classes: int) -> dict[str, Any]:
    """Accuracy, per-class precision and recall and the confusion matrix (rows: label, columns: prediction)."""
    matrix = [[0] * num_classes for _ in range(num_classes)]
    unlabelled = invalid = 0
    for (label, predicted), count in pair_counts.items():
        if label is None:
            unlabelled += count
        elif 0 <= label < num_classes:
            matrix[label][predicted] += count
        else:
            invalid += count
    evaluated = sum(map(sum, matrix)) + invalid
    correct = sum(matrix[k][k] for k in range(num_classes))
    predicted_totals = [sum(matrix[i][k] for i in range(num_classes)) for k in range(num_classes)]
    return {
        "rows_evaluated": evaluated,
        "rows_unlabelled": unlabelled,
        "labels_invalid": invalid,
        "accuracy": correct / evaluated if evaluated else None,
        # None where the ratio is 0/0: a class never predicted has no precision, one never seen no recall.
        "precision": [matrix[k][k] / predicted_totals[k] if predicted_totals[k] else None for k in range(num_classes)],
        "recall": [matrix[k][k] / sum(matrix[k]) if sum(matrix[k]) else None for k in range(num_classes)],
        "confusion_matrix": matrix,
    }


def _regression(predictions, label: str) -> dict[str, Any]:
    from pyspark.sql import functions as F

    error = F.col(PREDICTION).cast("double") - F.expr(f"try_cast({quoted(label)} AS double)")
    row = predictions.agg(
        F.count(error).alias("evaluated"),
        F.count(F.lit(1)).alias("rows"),
        F.avg(error * error).alias("mse"),
        F.avg(F.abs(error)).alias("mae"),
    ).first()
    return {
        "rows_evaluated": int(row["evaluated"]),
        "rows_unlabelled": int(row["rows"] - row["evaluated"]),
        "mse": row["mse"],
        "mae": row["mae"],
    }


def metrics_summary(metrics: dict[str, Any]) -> list[str]:
    """The metrics as indented lines for the job summary."""
    if "accuracy" in metrics:
        lines = [f"  accuracy      {_number(metrics['accuracy'])} over {metrics['rows_evaluated']} labelled rows"]
        lines.append("  precision     " + " ".join(_number(v) for v in metrics["precision"]))
        lines.append("  recall        " + " ".join(_number(v) for v in metrics["recall"]))
        lines.append("  confusion matrix (rows: label, columns: prediction)")
        width = max(len(str(v)) for row in metrics["confusion_matrix"] for v in row)
        lines += ["    " + " ".join(f"{v:>{width}}" for v in row) for row in metrics["confusion_matrix"]]
        if metrics["labels_invalid"]:
            lines.append(
                f"  labels that are no class of the model (outside 0..{len(metrics['confusion_matrix']) - 1}, "
                f"not an integer, or an unknown name): {metrics['labels_invalid']} rows (counted as wrong)"
            )
    else:
        lines = [
            f"  mse           {_number(metrics['mse'])}",
            f"  mae           {_number(metrics['mae'])} over {metrics['rows_evaluated']} labelled rows",
        ]
    if metrics["rows_unlabelled"]:
        lines.append(f"  unlabelled    {metrics['rows_unlabelled']} rows (not evaluated)")
    return lines


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
