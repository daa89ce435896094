"""A model artifact as an MLflow pyfunc model: raw feature columns in (a pandas DataFrame), predictions out.

The same `Predictor` as `sparkml-par score`, behind the dataset's fitted feature pipeline exported as plain
numbers (`data_prep.featurize.export_fitted`), so `mlflow.pyfunc.load_model` and `mlflow.pyfunc.spark_udf`
score as the project does, without Spark inside the model. Rows are not validated here: a row that
`sparkml-par score` would quarantine is the caller's to leave out. Loading needs this package installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow.pyfunc

from sparkml_par.contract import PREDICTION

ARTIFACT = "artifact"
FEATURES = "features.json"


class ArtifactModel(mlflow.pyfunc.PythonModel):
    """Classification: the class index as a float (what spark_udf's default double result holds);
    regression: the predicted value."""

    def load_context(self, context) -> None:
        from sparkml_par.infer.predictor import load_predictor

        self.predictor = load_predictor(context.artifacts[ARTIFACT])
        self.features = json.loads(Path(context.artifacts[FEATURES]).read_text())

    def predict(self, context, model_input, params=None):
        import pandas as pd

        from data_prep.featurize import apply_exported

        out = self.predictor.predict(apply_exported(self.features, model_input))
        return pd.Series(out[PREDICTION].astype("float64"), index=model_input.index, name=PREDICTION)
