"""The Optuna study behind a search: samplers, ask/tell, the trial budget, grid coverage and resume.

The study lives in `sqlite:///<tune.output>/study.db`, so running the same search again continues
it: finished trials (complete, failed, pruned) count toward the budget, and trials an interrupted
run left RUNNING are closed as failed, marked stale, and not counted (their work is redone).
One search at a time may use a given tune.output.

Grid search enqueues the grid's points itself instead of using Optuna's GridSampler: that sampler
calls `study.stop()` after the last point, which raises outside `study.optimize()`, and it assigns
points by trial number, so after a resume it would skip the points of stale trials.
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import optuna
from optuna.trial import TrialState

from sparkml_par.config import TuneConfig
from sparkml_par.errors import SparkmlParError
from sparkml_par.tune.space import SearchSpace

log = logging.getLogger("sparkml_par.tune")

STUDY_NAME = "sparkml_par"
STALE = "stale"  # user attribute of a trial closed because an earlier run stopped while it ran


@dataclass(frozen=True)
class TrialRequest:
    """One trial to run: its number in the study and its params as the config takes them."""

    number: int
    params: dict[str, Any]


@dataclass
class TrialOutcome:
    """What a trial came to. `score` is the tuned metric of a complete trial."""

    status: Literal["complete", "failed", "pruned"]
    score: float | None = None
    error: str | None = None
    started: float | None = None  # wall-clock seconds (time.time()) where the trial ran
    finished: float | None = None
    details: dict[str, Any] = field(default_factory=dict)  # host, pid, epochs, artifact ...


def storage_url(output_dir: str | Path) -> str:
    return f"sqlite:///{Path(output_dir).absolute() / 'study.db'}"


class Search:
    """Asks the sampler for trials while the budget lasts and tells it each result as it arrives.

    Not thread-safe: one thread (the search loop's) makes every call.
    """

    def __init__(self, study: optuna.Study, space: SearchSpace, tune: TuneConfig):
        self.study = study
        self.space = space
        self.method = tune.method
        self.prune = tune.prune
        self._distributions = space.distributions()
        self._grid = space.grid() if tune.method == "grid" else []
        self.budget = len(self._grid) if tune.method == "grid" else tune.trials
        self._running: dict[int, optuna.Trial] = {}

    @classmethod
    def open(cls, tune: TuneConfig, space: SearchSpace, output_dir: str | Path | None) -> "Search":
        """The study in output_dir/study.db, created or resumed; output_dir=None keeps it in memory."""
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the search loop logs each trial itself
        storage = None
        if output_dir is not None:
            Path(output_dir).mkdir(parents=True, exist_ok=True)
            # Concurrent trials report from one thread, but sqlite may still be busy for a moment.
            storage = optuna.storages.RDBStorage(
                storage_url(output_dir), engine_kwargs={"connect_args": {"timeout": 30}}
            )
        identity = {
            "method": tune.method,
            "metric": tune.metric,
            "direction": tune.direction,
            "space": space.describe(),
        }
        study = optuna.create_study(
            storage=storage, study_name=STUDY_NAME, direction=tune.direction, load_if_exists=True, pruner=_pruner(tune)
        )
        _check_same_search(study, identity, output_dir)
        _close_stale_trials(study)
        # A resumed run must not draw the first run's points again: the seed moves on with the study.
        study.sampler = _sampler(tune, seed=tune.seed + len(study.trials))
        return cls(study, space, tune)

    def finished_trials(self) -> list[optuna.trial.FrozenTrial]:
        """Trials that count toward the budget: complete, failed or pruned, and not stale."""
        return [
            t for t in self.study.get_trials(deepcopy=False) if t.state.is_finished() and not t.user_attrs.get(STALE)
        ]

    def remaining(self) -> int:
        """Trials still to start."""
        if self.method == "grid":
            return len(self._pending_grid_points())
        return max(0, self.budget - len(self.finished_trials()) - len(self._running))

    def ask(self) -> TrialRequest | None:
        """The next trial, or None when the budget is spent (or every grid point is done or running)."""
        if self.method == "grid":
            pending = self._pending_grid_points()
            if not pending:
                return None
            self.study.enqueue_trial(pending[0])
        elif self.remaining() == 0:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            trial = self.study.ask(self._distributions)
        self._running[trial.number] = trial
        return TrialRequest(trial.number, self.space.decode(trial.params))

    def report(self, number: int, step: int, value: float) -> str | None:
        """An intermediate value of a running trial; returns why it should stop ("diverged", "pruned") or None."""
        if not math.isfinite(value):
            return "diverged"
        trial = self._running[number]
        trial.report(value, step)
        return "pruned" if self.prune and trial.should_prune() else None

    def tell(self, number: int, outcome: TrialOutcome) -> optuna.trial.FrozenTrial:
        """Records the outcome; a complete trial whose score is not finite is recorded as failed (diverged)."""
        trial = self._running.pop(number)
        if outcome.status == "complete" and (outcome.score is None or not math.isfinite(outcome.score)):
            outcome = TrialOutcome(
                "failed",
                error=f"diverged: the score is {outcome.score}",
                started=outcome.started,
                finished=outcome.finished,
                details=outcome.details,
            )
        for key, value in _attributes(outcome).items():
            trial.set_user_attr(key, value)
        if outcome.status == "complete":
            return self.study.tell(trial, outcome.score)
        return self.study.tell(trial, state=TrialState.PRUNED if outcome.status == "pruned" else TrialState.FAIL)

    def _pending_grid_points(self) -> list[dict[str, Any]]:
        taken = {_point_key(t.params) for t in self.finished_trials()}
        taken |= {_point_key(t.params) for t in self._running.values()}
        return [point for point in self._grid if _point_key(point) not in taken]


def _point_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


def _attributes(outcome: TrialOutcome) -> dict[str, Any]:
    attrs: dict[str, Any] = {"status": outcome.status}
    if outcome.started is not None and outcome.finished is not None:
        attrs.update(started=outcome.started, finished=outcome.finished, duration=outcome.finished - outcome.started)
    if outcome.error:
        attrs["error"] = outcome.error
    attrs.update({k: v for k, v in outcome.details.items() if isinstance(v, (str, int, float, bool, type(None)))})
    return attrs


def startup_trials(budget: int) -> int:
    """How many trials TPE samples at random before it models the results: Optuna's 10, which would leave a
    budget of 10 or fewer (the default is 8) entirely random, so a third of a smaller budget, at least 2."""
    return max(2, min(10, budget // 3))


def _sampler(tune: TuneConfig, seed: int) -> optuna.samplers.BaseSampler:
    if tune.method == "bayes":
        startup = startup_trials(tune.trials)
        log.info("bayes search: the first %d of %d trials sample at random, TPE chooses the rest", startup, tune.trials)
        # With trials in flight, TPE treats running trials as bad results ("constant liar") so that
        # concurrent asks spread out instead of all landing on the current best region.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=tune.parallelism > 1)
    # Random search, and grid search, whose trials all arrive with every param fixed by enqueue_trial.
    return optuna.samplers.RandomSampler(seed=seed)


def _pruner(tune: TuneConfig) -> optuna.pruners.BasePruner:
    if not tune.prune:
        return optuna.pruners.NopPruner()
    # Successive halving over epochs: at epochs 1, 3, 9, ... a trial continues only when its value is in
    # the best third of the values other trials reported at that epoch.
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)


def _check_same_search(study: optuna.Study, identity: dict[str, Any], output_dir) -> None:
    saved = study.user_attrs.get("search")
    if saved is None:
        study.set_user_attr("search", identity)
        return
    changed = [key for key in identity if saved.get(key) != identity[key]]
    if changed:
        where = Path(output_dir) / "study.db" if output_dir is not None else "the study"
        raise SparkmlParError(
            f"{where} holds a search with a different {', '.join(changed)} "
            f"({', '.join(f'{k}: {saved.get(k)!r}' for k in changed)}); set tune.output to a new directory for a "
            f"new search, or restore those tune settings to continue the old one"
        )


def _close_stale_trials(study: optuna.Study) -> None:
    # Enqueued trials an earlier run never started are taken out of the queue the same way.
    while study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        study.ask()
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        trial = optuna.Trial(study, frozen._trial_id)
        trial.set_user_attr(STALE, True)
        trial.set_user_attr("status", "failed")
        trial.set_user_attr("error", "stale: the run that started this trial stopped before it finished")
        study.tell(trial, state=TrialState.FAIL)
        log.warning(
            "trial %d was left unfinished by an earlier run: recorded as failed (stale), not counted", frozen.number
        )
