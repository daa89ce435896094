"""Hyperparameter search: trials as Spark tasks, an Optuna study on disk, a table, a best config.

    result = tune(spark, cfg)     # sparkml_par.tune.job; `sparkml-par tune conf/tune.yaml` on the CLI

`space` maps tune.space onto Optuna distributions and trial params onto a Config, `study` owns the
ask/tell bookkeeping (budget, grid coverage, resume), `search_loop` keeps `tune.parallelism` trials in
flight, `trials` runs one trial as a Spark task, `outputs` writes the table, best YAML and plot.
"""
