"""A pipeline stage as data, and what the stages of one run share.

Each stage module (data_prep.job, tune.job, train.job, infer.score, report) exports one `STAGE`; the
runner in `sparkml_par.pipeline` loops over them. A stage's fingerprint hashes what its work depends on
(its config section and the fingerprints of its inputs); a stage whose fingerprint matches the last run's
and whose output is complete is skipped.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from typing import Any, Callable, Optional

from sparkml_par.config import Config, load_config
from sparkml_par.io.store import WorkingCopy, local_file


@dataclasses.dataclass
class StageRecord:
    fingerprint: str
    output: str
    seconds: float
    summary: dict[str, Any]


@dataclasses.dataclass
class Run:
    """What the stages of one run share: the session, the config, the run directory and the records so far."""

    spark: Any
    cfg: Config
    run_dir: WorkingCopy  # output.run_dir; .dir is local (a working copy of a remote one)
    tracker: Any  # sparkml_par.tracking.Tracker: the runner's, which the stage modules do not import
    records: dict[str, StageRecord] = dataclasses.field(default_factory=dict)
    stage_run: Optional[str] = None  # the MLflow run of the stage now running (None without tracking)

    @functools.cached_property
    def train_cfg(self) -> Config:
        """The config training uses: the tuned best config when this run tuned, else the run's own."""
        tuned = self.records.get("tune")
        if tuned is None:
            return self.cfg
        with local_file(tuned.output) as best:
            return load_config(best, [f"train.output={self.cfg.train.output}"])

    def dataset_fingerprint(self) -> str:
        return self.records["prepare"].summary["fingerprint"]


@dataclasses.dataclass(frozen=True)
class Stage:
    """`work(run, resume)` returns (output, summary); resume is true when the stage may continue from its
    own partial output (nothing changed, nothing forced)."""

    name: str
    fingerprint: Callable[[Run], str]
    complete: Callable[[Run], bool]
    work: Callable[[Run, bool], tuple[str, dict[str, Any]]]


def fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def always_due(_run: Run) -> bool:
    """The `complete` of a stage that runs every time (it skips unchanged work itself, or is cheap)."""
    return False
