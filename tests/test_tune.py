"""Hyperparameter search without Spark: the space, the study's ask/tell bookkeeping, the search loop.

The search loop and study here are the ones the Spark search uses; only `evaluate` is a plain function.
"""

from __future__ import annotations

import csv
import json
import math
import threading
import time

import pytest

from sparkml_par.config import Config, ParamSpace, TuneConfig, load_config
from sparkml_par.errors import ConfigError, SparkmlParError
from sparkml_par.tune import outputs
from sparkml_par.tune.search_loop import run_search
from sparkml_par.tune.space import SearchSpace, apply_params, check_space_fits
from sparkml_par.tune.study import Search, TrialOutcome


def _space(**params: ParamSpace) -> dict[str, ParamSpace]:
    return {f"train.{name}": param for name, param in params.items()}


def _tune(space: dict[str, ParamSpace], **settings) -> TuneConfig:
    return TuneConfig(space=space, **settings)


def _search(tune: TuneConfig, output=None) -> Search:
    return Search.open(tune, SearchSpace.from_config(tune.space), output)


def _complete(score_of):
    def evaluate(request, control):
        started = time.time()
        return TrialOutcome("complete", score=score_of(request.params), started=started, finished=time.time())

    return evaluate


# --- space -----------------------------------------------------------------------------------------------


def test_distributions_follow_the_declared_types():
    space = SearchSpace.from_config(
        _space(
            lr=ParamSpace("loguniform", 1e-4, 1e-1),
            momentum=ParamSpace("uniform", 0, 1),
            epochs=ParamSpace("int", 1, 5),
            optimizer=ParamSpace("choice", values=["sgd", "adam"]),
        )
    )
    d = space.distributions()
    assert (d["train.lr"].low, d["train.lr"].high, d["train.lr"].log) == (1e-4, 1e-1, True)
    assert (d["train.momentum"].low, d["train.momentum"].high, d["train.momentum"].log) == (0.0, 1.0, False)
    assert (d["train.epochs"].low, d["train.epochs"].high, d["train.epochs"].step) == (1, 5, 1)
    assert d["train.optimizer"].choices == ("sgd", "adam")


def test_choices_of_lists_are_stored_as_json_and_decoded():
    space = SearchSpace.from_config({"train.model_args.hidden": ParamSpace("choice", values=[[32], [64, 32]])})
    assert space.distributions()["train.model_args.hidden"].choices == ("[32]", "[64, 32]")
    assert space.decode({"train.model_args.hidden": "[64, 32]"}) == {"train.model_args.hidden": [64, 32]}


def test_grid_spreads_ranges_and_takes_explicit_values():
    space = SearchSpace.from_config(
        _space(
            lr=ParamSpace("loguniform", 1e-3, 1e-1, grid=3),
            epochs=ParamSpace("int", 1, 2, grid=5),
            momentum=ParamSpace("uniform", 0.0, 1.0, values=[0.5, 0.9]),
            optimizer=ParamSpace("choice", values=["sgd", "adam"]),
        )
    )
    grid = space.grid()
    lrs = sorted({p["train.lr"] for p in grid})
    assert lrs == pytest.approx([1e-3, 1e-2, 1e-1])
    assert sorted({p["train.epochs"] for p in grid}) == [1, 2]  # 5 points over [1, 2] are 2 distinct ints
    assert sorted({p["train.momentum"] for p in grid}) == [0.5, 0.9]
    assert len(grid) == 3 * 2 * 2 * 2
    assert len({json.dumps(p, sort_keys=True) for p in grid}) == len(grid)
    assert grid[0] == {
        "train.lr": pytest.approx(1e-3),
        "train.epochs": 1,
        "train.momentum": 0.5,
        "train.optimizer": "sgd",
    }


def test_grid_values_outside_the_range_are_refused():
    space = SearchSpace.from_config(_space(lr=ParamSpace("uniform", 0.0, 1.0, values=[0.5, 2.0])))
    with pytest.raises(ConfigError, match=r"grid values \[2.0\] lie outside \[low=0.0, high=1.0\]"):
        space.grid()


def test_params_become_train_settings_and_the_rest_is_kept():
    cfg = load_config(None, ["data.output=/data/x", "train.epochs=3", "tune.trials=5"])
    out = apply_params(
        cfg,
        {"train.lr": 1e-5, "train.model_args.hidden": [64, 32], "train.early_stopping.patience": 2},
        {"train.output": "/tmp/trial"},
    )
    assert out.train.lr == 1e-5 and out.train.model_args == {"hidden": [64, 32]}
    assert out.train.early_stopping.patience == 2 and out.train.output == "/tmp/trial"
    assert out.train.epochs == 3 and out.data == cfg.data and out.tune == cfg.tune
    assert cfg.train.lr == 1e-3  # the base config is untouched


@pytest.mark.parametrize(
    "key, param, message",
    [
        ("train.lrr", ParamSpace("uniform", 0, 1), "unknown key 'train.lrr': did you mean 'lr'"),
        ("train.epochs", ParamSpace("uniform", 1, 4), "train.epochs: expected an integer, got 1.0"),
        ("train.optimizer", ParamSpace("choice", values=["sgd", "lbfgs"]), "'lbfgs' is not allowed"),
    ],
)
def test_a_space_that_does_not_fit_the_config_fails_before_any_trial(key, param, message):
    space = SearchSpace.from_config({"train.momentum": ParamSpace("uniform", 0, 1), key: param})
    with pytest.raises(ConfigError, match=f"tune.space.{key} does not fit the config") as info:
        check_space_fits(Config(), space)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "space, message",
    [
        ({}, "tune.space is empty"),
        (
            {"data.rows": ParamSpace("uniform", 0, 1)},
            "tune.space key 'data.rows' names a data setting; a search varies train settings only",
        ),
        ({"lr": ParamSpace("uniform", 0, 1), "train.lr": ParamSpace("uniform", 0, 1)}, "names 'train.lr' twice"),
        ({"train.output": ParamSpace("choice", values=["a"])}, "tune.space key 'train.output' cannot be searched"),
        ({"train.epochs": ParamSpace("int", 1, 2.5)}, "an int parameter needs whole bounds"),
    ],
)
def test_bad_spaces_are_refused_with_the_key(space, message):
    with pytest.raises(ConfigError, match=message):
        SearchSpace.from_config(space)


def test_keys_without_the_train_prefix_name_train_settings():
    cfg = load_config(None, ["tune.space.lr.type=loguniform", "tune.space.lr.low=0.001", "tune.space.lr.high=0.1"])
    space = SearchSpace.from_config(cfg.tune.space)
    assert list(space.params) == ["train.lr"]
    assert apply_params(cfg, space.decode(space.grid()[1])).train.lr == pytest.approx(0.01)


def test_space_entries_load_from_yaml(tmp_path):
    path = tmp_path / "tune.yaml"
    path.write_text(
        "tune:\n  method: grid\n  space:\n    train.lr: {type: choice, values: [0.01, 0.1]}\n"
        "    train.model_args.hidden: {type: choice, values: [[8], [16, 8]]}\n"
    )
    cfg = load_config(path)
    space = SearchSpace.from_config(cfg.tune.space)
    assert [space.decode(p) for p in space.grid()][-1] == {"train.lr": 0.1, "train.model_args.hidden": [16, 8]}


# --- study, search loop ------------------------------------------------------------------------------------


def test_grid_search_runs_every_point_exactly_once_with_trials_in_flight():
    tune = _tune(
        _space(lr=ParamSpace("choice", values=[0.1, 0.01, 0.001]), epochs=ParamSpace("int", 1, 3, grid=3)),
        method="grid",
        trials=2,
        parallelism=3,
    )  # trials does not cut a grid short
    search = _search(tune)
    in_flight, most = [0], [0]
    lock = threading.Lock()

    def evaluate(request, control):
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        time.sleep(0.02)
        with lock:
            in_flight[0] -= 1
        return TrialOutcome("complete", score=request.params["train.lr"] * request.params["train.epochs"])

    assert run_search(search, evaluate, tune.parallelism) == 9
    ran = sorted((t.params["train.lr"], t.params["train.epochs"]) for t in search.study.trials)
    assert ran == sorted((lr, e) for lr in (0.1, 0.01, 0.001) for e in (1, 2, 3))
    assert most[0] == 3
    assert search.study.best_value == pytest.approx(0.001)


def test_failed_and_diverged_trials_are_recorded_and_the_search_goes_on():
    tune = _tune(_space(optimizer=ParamSpace("choice", values=["sgd", "adam", "adamw"])), method="grid", parallelism=2)
    search = _search(tune)

    def evaluate(request, control):
        if request.params["train.optimizer"] == "sgd":
            raise RuntimeError("loss exploded in batch 3")
        return TrialOutcome("complete", score=math.nan if request.params["train.optimizer"] == "adam" else 0.5)

    assert run_search(search, evaluate, 2) == 3
    by_optimizer = {t.params["train.optimizer"]: t for t in search.study.trials}
    assert by_optimizer["sgd"].state.name == "FAIL"
    assert by_optimizer["sgd"].user_attrs["error"] == "RuntimeError: loss exploded in batch 3"
    assert by_optimizer["adam"].state.name == "FAIL"
    assert by_optimizer["adam"].user_attrs["error"] == "diverged: the score is nan"
    assert by_optimizer["adamw"].state.name == "COMPLETE" and by_optimizer["adamw"].value == 0.5


def test_a_trial_whose_metric_becomes_nan_is_stopped_as_diverged():
    tune = _tune(_space(lr=ParamSpace("uniform", 0.0, 1.0)), method="random", trials=2, parallelism=1)
    search = _search(tune)
    stopped = []

    def evaluate(request, control):
        for epoch in range(1, 6):
            control.report(epoch, 1.0 if epoch < 3 else math.nan)
            if control.wait_for_stop(0.5):
                stopped.append(epoch)
                return TrialOutcome("failed", error="cancelled")
        return TrialOutcome("complete", score=1.0)

    run_search(search, evaluate, 1)
    assert stopped == [3, 3]
    assert [t.user_attrs["error"] for t in search.study.trials] == ["diverged: the metric is nan at step 3"] * 2


def test_pruning_stops_weak_trials_by_successive_halving():
    tune = _tune(
        _space(lr=ParamSpace("uniform", 0.0, 1.0)), method="random", trials=12, parallelism=1, prune=True, seed=3
    )
    search = _search(tune)
    epochs_run = {}

    def evaluate(request, control):
        lr = request.params["train.lr"]
        for epoch in range(1, 10):
            control.report(epoch, lr + 1.0 / epoch)  # a smaller lr is better at every epoch
            if control.wait_for_stop(0.05):
                return TrialOutcome("failed", error="cancelled")  # what a cancelled Spark job comes to
            epochs_run[request.number] = epoch
        return TrialOutcome("complete", score=lr + 1.0 / 9)

    run_search(search, evaluate, 1)
    trials = search.study.trials
    pruned = [t for t in trials if t.state.name == "PRUNED"]
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(trials) == 12 and pruned and complete
    assert all(epochs_run.get(t.number, 0) < 9 for t in pruned)
    # A pruned trial's value is its last intermediate value; the best trial was never pruned.
    assert all(t.value == pytest.approx(t.params["train.lr"] + 1.0 / (max(t.intermediate_values))) for t in pruned)
    assert search.study.best_trial.state.name == "COMPLETE"
    assert min(t.params["train.lr"] for t in complete) <= min(t.params["train.lr"] for t in pruned)


def test_a_trial_that_finished_before_the_stop_request_stays_complete():
    tune = _tune(_space(lr=ParamSpace("uniform", 0.0, 1.0)), method="random", trials=1, parallelism=1)
    search = _search(tune)

    def evaluate(request, control):
        control.report(1, math.nan)  # the last epoch, read after the task had already returned
        control.wait_for_stop(5)
        return TrialOutcome("complete", score=0.25)

    run_search(search, evaluate, 1)
    assert search.study.trials[0].state.name == "COMPLETE" and search.study.trials[0].value == 0.25


def test_without_prune_no_trial_is_stopped():
    tune = _tune(_space(lr=ParamSpace("uniform", 0.0, 1.0)), method="random", trials=6, parallelism=1, prune=False)
    search = _search(tune)

    def evaluate(request, control):
        for epoch in range(1, 4):
            control.report(epoch, request.params["train.lr"] * 10 / epoch)
            assert not control.wait_for_stop(0.02)
        return TrialOutcome("complete", score=request.params["train.lr"])

    run_search(search, evaluate, 1)
    assert [t.state.name for t in search.study.trials] == ["COMPLETE"] * 6


def test_resume_continues_the_study_and_closes_stale_trials(tmp_path):
    space = _space(lr=ParamSpace("loguniform", 1e-4, 1e-1), epochs=ParamSpace("int", 1, 9))
    first = _search(_tune(space, method="random", trials=3), tmp_path)
    run_search(first, _complete(lambda p: p["train.lr"]), 1)
    killed = _search(_tune(space, method="random", trials=3), tmp_path)
    killed.study.ask(killed.space.distributions())  # a trial a killed run left RUNNING

    resumed = _search(_tune(space, method="random", trials=5), tmp_path)
    assert resumed.remaining() == 2
    assert run_search(resumed, _complete(lambda p: p["train.lr"]), 2) == 2
    trials = resumed.study.trials
    assert [t.number for t in trials] == [0, 1, 2, 3, 4, 5]
    assert trials[3].state.name == "FAIL" and trials[3].user_attrs["stale"] is True
    assert trials[3].user_attrs["error"].startswith("stale:")
    assert [t.state.name for t in trials[:3] + trials[4:]] == ["COMPLETE"] * 5
    # The resumed sampler does not draw the first run's points again.
    first_points = {json.dumps(t.params, sort_keys=True) for t in trials[:3]}
    assert not first_points & {json.dumps(t.params, sort_keys=True) for t in trials[4:]}

    # Done: one more run with the same budget runs nothing.
    assert run_search(_search(_tune(space, method="random", trials=5), tmp_path), _complete(lambda p: 0.0), 2) == 0


def test_grid_resume_redoes_only_the_missing_points(tmp_path):
    space = _space(lr=ParamSpace("choice", values=[0.1, 0.01]), epochs=ParamSpace("choice", values=[1, 2]))
    first = _search(_tune(space, method="grid", parallelism=2), tmp_path)

    def evaluate(request, control):
        if request.number == 1:
            control.wait_for_stop(30)  # still running when the search is interrupted
            return TrialOutcome("failed", error="cancelled")
        return TrialOutcome("complete", score=1.0)

    def interrupt(_trial):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_search(first, evaluate, 2, on_finished=interrupt)
    resumed = _search(_tune(space, method="grid"), tmp_path)
    assert [t.user_attrs.get("stale", False) for t in resumed.study.trials] == [False, True]
    assert resumed.remaining() == 3
    assert run_search(resumed, _complete(lambda p: 1.0), 2) == 3
    complete = [t.params for t in resumed.study.trials if t.state.name == "COMPLETE"]
    assert sorted(json.dumps(p, sort_keys=True) for p in complete) == sorted(
        json.dumps({"train.lr": lr, "train.epochs": e}, sort_keys=True) for lr in (0.1, 0.01) for e in (1, 2)
    )


def test_a_different_search_in_the_same_output_is_refused(tmp_path):
    space = _space(lr=ParamSpace("uniform", 0.0, 1.0))
    run_search(_search(_tune(space, method="random", trials=1), tmp_path), _complete(lambda p: 1.0), 1)
    with pytest.raises(
        SparkmlParError,
        match=r"study.db holds a search with a different method, metric "
        r"\(method: 'random', metric: 'val_loss'\); set tune.output",
    ):
        _search(_tune(space, method="bayes", metric="val_accuracy"), tmp_path)


# --- reports ---------------------------------------------------------------------------------------------


def test_reports_hold_every_trial_and_the_best_config(tmp_path):
    tune = _tune(
        _space(lr=ParamSpace("choice", values=[0.3, 0.1, 0.2]), model_args__hidden=ParamSpace("choice", values=[[8]])),
        method="grid",
        metric="val_accuracy",
        direction="maximize",
    )
    tune.space = {"train.lr": tune.space["train.lr"], "train.model_args.hidden": tune.space["train.model_args__hidden"]}
    search = _search(tune, tmp_path)

    def evaluate(request, control):
        if request.params["train.lr"] == 0.3:
            raise ValueError("no")
        return TrialOutcome("complete", score=1 - request.params["train.lr"], started=100.0, finished=102.5)

    run_search(search, evaluate, 1)
    rows = outputs.trial_rows(search.study, search.space)
    json_path, csv_path = outputs.write_table(rows, tmp_path)
    cfg = load_config(None, ["train.num_proc=4", "train.output=/models/best"])
    outputs.write_best_config(
        cfg, outputs.best_trial(search.study), search.space, "val_accuracy", tmp_path / "best.yaml"
    )
    plot = outputs.plot_scores(rows, "val_accuracy", "maximize", tmp_path / "scores.png")

    table = list(csv.DictReader(csv_path.open()))
    assert [(r["number"], r["status"], r["train.lr"], r["train.model_args.hidden"]) for r in table] == [
        ("0", "failed", "0.3", "[8]"),
        ("1", "complete", "0.1", "[8]"),
        ("2", "complete", "0.2", "[8]"),
    ]
    assert table[0]["error"] == "ValueError: no" and table[1]["duration_s"] == "2.5"
    assert float(table[1]["score"]) == pytest.approx(0.9)
    assert json.loads(json_path.read_text())[1]["params"] == {"train.lr": 0.1, "train.model_args.hidden": [8]}
    best = load_config(tmp_path / "best.yaml")
    assert best.train.lr == 0.1 and best.train.model_args == {"hidden": [8]}
    assert best.train.num_proc == 4 and best.train.output == "/models/best"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- Bayesian vs random ----------------------------------------------------------------------------------

# A known objective over four parameters of the kinds a search has (log-scale, linear, integer):
# its minimum 0 lies at lr=10^-2.5, momentum=0.9, weight_decay=0.3, epochs=7.
_SYNTHETIC_SPACE = _space(
    lr=ParamSpace("loguniform", 1e-5, 1.0),
    momentum=ParamSpace("uniform", 0.0, 1.0),
    weight_decay=ParamSpace("uniform", 0.0, 1.0),
    epochs=ParamSpace("int", 1, 20),
)


def _synthetic_objective(p: dict) -> float:
    return (
        (math.log10(p["train.lr"]) + 2.5) ** 2 / 4
        + 3 * (p["train.momentum"] - 0.9) ** 2
        + 3 * (p["train.weight_decay"] - 0.3) ** 2
        + ((p["train.epochs"] - 7) / 6) ** 2
    )


def _seeds_where_bayes_beats_random(trials: int) -> list[int]:
    """Of seeds 0..4, those whose Bayesian search found a better value than random search with the same budget."""
    wins = []
    for seed in range(5):
        best = {}
        for method in ("random", "bayes"):
            search = _search(_tune(_SYNTHETIC_SPACE, method=method, trials=trials, parallelism=1, seed=seed))
            assert run_search(search, _complete(_synthetic_objective), 1) == trials
            best[method] = search.study.best_value
        if best["bayes"] < best["random"]:
            wins.append(seed)
    return wins


def test_bayesian_search_beats_random_search_for_the_same_budget():
    wins = _seeds_where_bayes_beats_random(30)
    assert len(wins) >= 3, f"TPE beat random search with seeds {wins} only"


def test_a_small_bayesian_budget_is_guided_after_a_short_random_start(caplog):
    """Optuna's TPE samples its first 10 trials at random: the default budget of 8 would never be guided."""
    caplog.set_level("INFO", logger="sparkml_par.tune")
    wins = _seeds_where_bayes_beats_random(8)
    assert len(wins) >= 3, f"TPE beat random search with seeds {wins} only"
    assert "bayes search: the first 2 of 8 trials sample at random, TPE chooses the rest" in caplog.text
