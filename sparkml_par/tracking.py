"""Experiment tracking in MLflow: one run per pipeline run, a nested run per stage (and per tuning trial).

The pipeline runner's side of MLflow, an entry point like the runner: it imports the stages' packages
(the artifact, the feature pipeline, the pyfunc model) where it logs the model; the stages reach it only
through `Run.tracker`, so none of them imports it.

The only module that imports MLflow (an optional extra, `pip install .[mlflow]`), and only when
`tracking.tracking_uri` is set. It talks to the server through `MlflowClient` with explicit run ids, so
nothing depends on MLflow's process-global active run, and every call goes through `Tracker._call`: a
server that is down or refuses a write never fails a run. The first failure is logged once, everything
after it is skipped, and the run's summary says what was not logged; with `tracking.required: true` an
unreachable server fails the run before any work starts instead.

Resumed and re-run pipelines: the ids of the pipeline's MLflow run and of its stages' runs are kept in
the run directory (`tracking.json`). A pipeline run that did not finish is continued in the same MLflow
run, and a training stage that resumes from its checkpoints logs to the same nested run; a stage skipped
as unchanged gets a nested run tagged `sparkml_par.skipped`, with nothing logged twice.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import time
from importlib.metadata import version as _package_version
from pathlib import Path
from typing import Any, Callable, Optional

from sparkml_par.config import Config, TrackingConfig
from sparkml_par.errors import SparkmlParError
from sparkml_par.io import local_files
from sparkml_par.io.store import local_file

log = logging.getLogger("sparkml_par.tracking")

STATE_FILE = "tracking.json"
SKIPPED_TAG = "sparkml_par.skipped"
STAGE_TAG = "sparkml_par.stage"
# MLflow's limits on one log_batch call and on a parameter value.
_BATCH = 100
_PARAM_CHARS = 6000
# A server that does not answer is given up on in seconds, not after MLflow's default minutes of retries.
_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested config sections as `section.key` entries: MLflow params are flat."""
    if isinstance(value, dict) and value:
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def numeric_metrics(record: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers of a record (an epoch, test or scoring metrics): what MLflow can plot."""
    return {
        f"{prefix}{key}": float(value)
        for key, value in record.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))
    }


class Tracker:
    """The MLflow side of one pipeline run. Disabled (every method a no-op) when tracking is off."""

    def __init__(self, cfg: TrackingConfig, run_dir: Path):
        self.cfg = cfg
        self.enabled = cfg.tracking_uri is not None
        self.failures: list[str] = []
        self._down = False
        self._state_path = run_dir / STATE_FILE
        self._state: dict[str, Any] = json.loads(self._state_path.read_text()) if self._state_path.exists() else {}
        self._client = None
        self.run_id: Optional[str] = None

    # ------------------------------------------------------------------------------------------ the run tree

    def start(self, config: Config) -> None:
        """Opens (or, after an unfinished run, reopens) the pipeline's MLflow run; proves the server answers."""
        if not self.enabled or self._client is not None:
            return
        for name, value in _HTTP_DEFAULTS.items():
            os.environ.setdefault(name, value)
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise SparkmlParError(
                f"tracking.tracking_uri={self.cfg.tracking_uri!r} needs MLflow, which is not installed; "
                f"`pip install .[mlflow]` (or `pip install mlflow`), or unset tracking.tracking_uri"
            ) from None
        self._client = MlflowClient(tracking_uri=self.cfg.tracking_uri)
        try:
            experiment = self._client.get_experiment_by_name(self.cfg.experiment)
            experiment_id = (
                experiment.experiment_id if experiment else self._client.create_experiment(self.cfg.experiment)
            )
        except Exception as exc:  # noqa: BLE001 - whatever the client raises, the server did not take it
            if self.cfg.required:
                raise SparkmlParError(
                    f"tracking.tracking_uri={self.cfg.tracking_uri!r}: the MLflow server did not answer "
                    f"({_first_line(exc)}); start it, fix the URI, or set tracking.required=false to run "
                    f"without tracking"
                ) from None
            self._fail("opening the experiment", exc)
            return
        previous = self._state.get("run_id")
        if previous and not self._state.get("finished") and self._call("reopening the run", self._reopen, previous):
            self.run_id = previous
            log.info("tracking: continuing MLflow run %s (the last run did not finish)", previous)
        else:
            tags = {**self.cfg.tags, STAGE_TAG: "pipeline"}
            run = self._call(
                "creating the run", self._client.create_run, experiment_id, run_name=self.cfg.run_name, tags=tags
            )
            if run is None:
                return
            self.run_id = run.info.run_id
            self._state = {"run_id": self.run_id, "experiment_id": experiment_id, "stages": {}}
            self._save()
            self.log_params(self.run_id, flatten(config.to_dict()))
            log.info(
                "tracking: MLflow run %s in experiment %r at %s",
                self.run_id,
                self.cfg.experiment,
                self.cfg.tracking_uri,
            )
        self._state["experiment_id"] = experiment_id

    def stage_run(self, stage: str, resume: bool) -> Optional[str]:
        """The nested run of a stage: the one it had when it resumes its own partial work, else a new one."""
        if self.run_id is None or self._down:
            return None
        stages = self._state.setdefault("stages", {})
        if resume and stage in stages:
            return stages[stage]
        run = self.child_run(self.run_id, stage, {STAGE_TAG: stage})
        if run is not None:
            stages[stage] = run
            self._save()
        return run

    def child_run(self, parent: str, name: str, tags: dict[str, str]) -> Optional[str]:
        run = self._call(
            f"creating the run of {name}",
            self._client.create_run,
            self._state["experiment_id"],
            run_name=name,
            tags={**{key: str(value) for key, value in tags.items()}, "mlflow.parentRunId": parent},
        )
        return None if run is None else run.info.run_id

    def trial(self, parent: Optional[str], trial: dict[str, Any], metric: str) -> None:
        """One tuning trial (a row of the trials table) as a nested run of the tune stage's run."""
        if parent is None:
            return
        run = self.child_run(
            parent, f"trial {trial['number']}", {STAGE_TAG: "trial", "sparkml_par.trial": trial["number"]}
        )
        if run is None:
            return
        self.log_params(run, trial["params"])
        values = {metric: trial["score"], "epochs": trial["epochs"], "duration_s": trial["duration_s"]}
        self.log_metrics(run, numeric_metrics({k: v for k, v in values.items() if v is not None}))
        self.set_tags(
            run,
            {
                "sparkml_par.status": trial["status"],
                **({"sparkml_par.error": trial["error"]} if trial["error"] else {}),
            },
        )
        self.finish(run, failed=trial["status"] == "failed")

    def skipped(self, stage: str, record_output: str) -> None:
        """A stage skipped as unchanged: a nested run that says so, and points at what it would have made."""
        run = self.child_run(self.run_id, stage, {STAGE_TAG: stage, SKIPPED_TAG: "true"}) if self.run_id else None
        if run is not None:
            self.set_tags(run, {"sparkml_par.output": record_output})
            self.finish(run)

    def stage_done(self, run_id: Optional[str], record) -> None:
        """A finished stage: its summary's numbers as metrics, its words as tags, its seconds; the run ended."""
        if run_id is None:
            return
        summary = flatten(record.summary)
        self.log_metrics(run_id, {**numeric_metrics(summary), "seconds": record.seconds})
        words = {key: value for key, value in summary.items() if isinstance(value, str)}
        self.set_tags(
            run_id, {**words, "sparkml_par.output": record.output, "sparkml_par.fingerprint": record.fingerprint}
        )
        self.finish(run_id)

    def finish(self, run_id: Optional[str], failed: bool = False) -> None:
        if run_id is not None:
            self._call("ending a run", self._client.set_terminated, run_id, "FAILED" if failed else "FINISHED")

    def finish_pipeline(self, failed: bool) -> None:
        if self.run_id is None:
            return
        self.finish(self.run_id, failed)
        if not failed:
            self._state["finished"] = True
            self._save()

    # -------------------------------------------------------------------------------------------- logging

    def log_test_metrics(self, run_id: Optional[str], metrics: dict[str, Any]) -> None:
        self.log_metrics(run_id, numeric_metrics(metrics, "test_"))

    def log_params(self, run_id: Optional[str], params: dict[str, Any]) -> None:
        if run_id is None:  # tracking off: MLflow, an optional extra, may not even be installed
            return
        from mlflow.entities import Param

        items = [Param(key, str(value)[:_PARAM_CHARS]) for key, value in params.items()]
        for start in range(0, len(items), _BATCH):
            self._batch(run_id, params=items[start : start + _BATCH])

    def log_metrics(self, run_id: Optional[str], metrics: dict[str, float], step: int = 0) -> None:
        if run_id is None:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(key, value, now, step) for key, value in metrics.items()]
        for start in range(0, len(items), _BATCH):
            self._batch(run_id, metrics=items[start : start + _BATCH])

    def set_tags(self, run_id: Optional[str], tags: dict[str, Any]) -> None:
        if run_id is None:
            return
        from mlflow.entities import RunTag

        self._batch(run_id, tags=[RunTag(key, str(value)) for key, value in tags.items()])

    def log_artifact(self, run_id: Optional[str], path: Path, artifact_path: Optional[str] = None) -> None:
        if run_id is None or not path.exists():
            return
        log_one = self._client.log_artifacts if path.is_dir() else self._client.log_artifact
        self._call(f"uploading {path.name}", log_one, run_id, str(path), artifact_path)

    def log_file(self, run_id: Optional[str], url: str, artifact_path: Optional[str] = None) -> None:
        """A file the store holds (train.output's metrics.jsonl, local or remote), fetched only when tracked."""
        if run_id is None:
            return
        with local_file(url) as path:
            self.log_artifact(run_id, path, artifact_path)

    def log_model(self, run_id: Optional[str], artifact_url: str) -> None:
        """The artifact as an MLflow pyfunc model under `model` (signature, input example), registered under
        tracking.register_model when set."""
        if run_id is None:
            return
        if self._call("logging the model", self._log_model, run_id, artifact_url) and self.cfg.register_model:
            self._call("registering the model", self._register, run_id)

    def _log_model(self, run_id: str, artifact_url: str) -> bool:
        import mlflow.pyfunc
        import numpy as np
        import pandas as pd
        from mlflow.models import infer_signature

        from data_prep.featurize import export_fitted
        from sparkml_par.infer.mlflow_model import ARTIFACT, FEATURES, ArtifactModel
        from sparkml_par.io.store import Store
        from sparkml_par.train.artifact import load_model_artifact

        _, description = load_model_artifact(artifact_url)
        raw_types = description["raw_feature_types"]
        exported = export_fitted(description["feature_pipeline"], raw_types)
        if exported is None:
            why = (
                "its dataset's feature pipeline is a saved Spark ML model (prepared by an older version: prepare "
                "and train again)"
                if isinstance(description["feature_pipeline"], str)
                else "its features are not all numbers"
            )
            log.warning("tracking: the model is not logged as an MLflow model: %s", why)
            self.failures.append(f"the MLflow model ({why})")
            return False
        with tempfile.TemporaryDirectory(prefix="sparkml_par-mlflow-") as directory:
            root = Path(directory)
            Store(artifact_url).download(root / ARTIFACT)
            (root / FEATURES).write_text(json.dumps(exported))
            if "vector" in exported:
                example = pd.DataFrame({exported["vector"]: [np.zeros(int(np.prod(description["feature_shape"])))] * 2})
            else:
                # The signature's types are the validated ones: whole numbers stay integers.
                example = pd.DataFrame(
                    {
                        name: np.array([0, 1], dtype=np.int64 if raw_types[name] == "int" else np.float64)
                        for name in exported["columns"]
                    }
                )
            mlflow.pyfunc.save_model(
                path=str(root / "model"),
                python_model=ArtifactModel(),
                artifacts={ARTIFACT: str(root / ARTIFACT), FEATURES: str(root / FEATURES)},
                signature=infer_signature(example, pd.Series([0.0] * len(example), name="prediction")),
                input_example=example,
                pip_requirements=[f"{name}=={_version(name)}" for name in ("torch", "numpy", "pandas")],
            )
            self._client.log_artifacts(run_id, str(root / "model"), "model")
        return True

    def _register(self, run_id: str) -> None:
        name = self.cfg.register_model
        from mlflow.exceptions import MlflowException

        try:
            self._client.get_registered_model(name)
        except MlflowException:
            self._client.create_registered_model(name)
        version = self._client.create_model_version(name, f"runs:/{run_id}/model", run_id=run_id)
        log.info("tracking: registered model %r version %s", name, version.version)

    def epoch_logger(self, run_id: Optional[str]) -> Optional[Callable[[dict[str, Any]], None]]:
        """What train() calls with rank 0's record after every epoch: its metrics, step = the epoch."""
        if run_id is None:
            return None
        return lambda record: self.log_metrics(run_id, numeric_metrics(record), step=int(record["epoch"]))

    def not_logged(self) -> Optional[str]:
        """One line for the run's summary when something could not be logged."""
        if not self.failures:
            return None
        return f"tracking: not logged to {self.cfg.tracking_uri}: {'; '.join(self.failures)}"

    # ------------------------------------------------------------------------------------------- plumbing

    def _batch(self, run_id: Optional[str], **items) -> None:
        if run_id is not None and any(items.values()):
            self._call("logging", self._client.log_batch, run_id, **items)

    def _reopen(self, run_id: str) -> bool:
        self._client.update_run(run_id, status="RUNNING")
        return True

    def _call(self, what: str, fn, *args, **kwargs):
        if self._client is None or self._down:
            if self.enabled and what not in self.failures:
                self.failures.append(what)
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - tracking never fails a run
            self._fail(what, exc)
            return None

    def _fail(self, what: str, exc: Exception) -> None:
        self._down = True
        log.warning(
            "tracking: %s failed (%s); the run goes on without tracking, and its summary lists what was not logged",
            what,
            _first_line(exc),
        )
        self.failures.append(f"{what} ({_first_line(exc)})")

    def _save(self) -> None:
        local_files.write_text(self._state_path, json.dumps(self._state, indent=2))


def _version(package: str) -> str:
    return _package_version(package).split("+")[0]


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
