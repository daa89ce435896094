# Databricks notebook source
# MAGIC %md
# MAGIC # sparkml_par on Databricks
# MAGIC
# MAGIC Prepare a petastorm dataset, train with Horovod ranks in a Spark barrier stage on this cluster, score the
# MAGIC test split and write the run report, all on the notebook's own `spark` session (used as is, never
# MAGIC stopped). Import the repository as a Databricks Repo (or install the `sparkml_par` wheel on the cluster),
# MAGIC then set the widgets: `output_root` must be a path the driver and the executors share, such as
# MAGIC `/dbfs/tmp/sparkml_par/run1`; `overrides` takes `section.key=value` settings separated by spaces.
# MAGIC The cluster needs at least `train.num_proc` task slots for the barrier stage.

# COMMAND ----------

import shlex
import sys
from pathlib import Path

# The repository root: a Repo notebook runs in its own folder (jobs/); a caller may have chdir'ed to the root.
REPO = Path.cwd().parent if Path.cwd().name == "jobs" else Path.cwd()
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def setting(name, default):
    """A variable the caller already defined (a test, %run), else the widget of that name, else the default."""
    if name in globals():
        return globals()[name]
    try:
        dbutils.widgets.text(name.lower(), default)  # noqa: F821 - dbutils exists only in Databricks notebooks
        return dbutils.widgets.get(name.lower())  # noqa: F821
    except NameError:
        return default


CONF = setting("CONF", str(REPO / "conf" / "quickstart.yaml"))
OUTPUT_ROOT = setting("OUTPUT_ROOT", "/dbfs/tmp/sparkml_par/notebook")
OVERRIDES = setting("OVERRIDES", "")
OVERRIDES = shlex.split(OVERRIDES) if isinstance(OVERRIDES, str) else list(OVERRIDES)

# COMMAND ----------

from sparkml_par.config import load_config
from sparkml_par.logs import setup_logging

root = OUTPUT_ROOT.rstrip("/")
cfg = load_config(
    CONF,
    [
        f"output.run_dir={root}",
        f"data.output={root}/dataset",
        f"train.output={root}/model",
        f"score.output={root}/predictions",
        f"tune.output={root}/tune",
        "train.launcher=barrier",
        *OVERRIDES,  # last, so they win
    ],
)
setup_logging(cfg.output.quiet, cfg.output.log_format)
Path(cfg.output.run_dir).mkdir(parents=True, exist_ok=True)
Path(cfg.output.run_dir, "config.yaml").write_text(cfg.to_yaml())
print(cfg.to_yaml())

# COMMAND ----------

from data_prep.job import prepare
from data_prep.job import summary as prepare_summary

prepared = prepare(spark, cfg.data)  # noqa: F821 - the notebook's session
print(prepare_summary(prepared))

# COMMAND ----------

from sparkml_par.train.job import summary as train_summary
from sparkml_par.train.job import train

trained = train(spark, cfg)  # noqa: F821
print(train_summary(trained))

# COMMAND ----------

from sparkml_par.infer.score import score_job
from sparkml_par.infer.score import summary as score_summary

scored = score_job(spark, cfg)  # noqa: F821
print(score_summary(scored))
if "display" in globals():  # Databricks' table view of the first predictions
    display(spark.read.parquet(scored.output).limit(10))  # noqa: F821

# COMMAND ----------

from sparkml_par.report import write_report

report_path = write_report(cfg.output.run_dir, cfg)
print(f"report {report_path}")
# The page refers to its plots by file name; on Databricks open it from DBFS (or download the folder).
