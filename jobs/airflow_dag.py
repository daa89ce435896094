"""Airflow DAG `sparkml_par_pipeline`: prepare -> train -> score -> report, once a day.

Each task spark-submits one of the jobs/ scripts to the cluster behind an Airflow Spark connection,
with the same config file and the run date in every output path, so each day's run has its own
directory: <root>/<ds>/dataset, model, predictions and report (its run directory is <root>/<ds>).
A re-run of a day reuses what its stages already wrote (prepare skips an unchanged dataset, train
resumes from its checkpoints, score replaces its predictions).

Settings, as Airflow Variables (each has a default, so the DAG loads without any):

    sparkml_par_spark_conn_id  Spark connection of the tasks              spark_default
    sparkml_par_home           checkout holding jobs/ and conf/           this file's repository
    sparkml_par_conf           config file                                <home>/conf/quickstart.yaml
    sparkml_par_output_root    root of the per-day run directories        /tmp/sparkml_par/runs
    sparkml_par_py_files       --py-files, e.g. <home>/dist/sparkml_par.zip   none

The driver and the executors import sparkml_par: install it on the cluster, or ship it with
sparkml_par_py_files (a zip of sparkml_par/ and data_prep/). train.output and the run directory must be
paths the driver and the executors share (a mounted filesystem); the dataset and predictions may be
any URL Spark reads. Copy or link this file into the DAG folder; set sparkml_par_home when the Airflow
workers' checkout is not this file's repository.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow import DAG
from airflow.models import Variable
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

DAG_ID = "sparkml_par_pipeline"
STAGES = ("prepare", "train", "score", "report")

# Read when the file is parsed: the operator's conn_id is not a template field. Everything else is a
# template, resolved when a task runs, so parsing costs one Variable look-up.
SPARK_CONN_ID = Variable.get("sparkml_par_spark_conn_id", default_var="spark_default")

_HOME_VALUE = "var.value.get('sparkml_par_home', '%s')" % Path(__file__).resolve().parent.parent
_HOME = "{{ %s }}" % _HOME_VALUE
_CONF = "{{ var.value.get('sparkml_par_conf', %s ~ '/conf/quickstart.yaml') }}" % _HOME_VALUE
_RUN_DIR = "{{ var.value.get('sparkml_par_output_root', '/tmp/sparkml_par/runs') }}/{{ ds }}"
_PY_FILES = "{{ var.value.get('sparkml_par_py_files', '') }}"

# The same outputs in every task, so each stage finds what the one before it wrote.
OVERRIDES = [
    f"output.run_dir={_RUN_DIR}",
    f"data.output={_RUN_DIR}/dataset",
    f"train.output={_RUN_DIR}/model",
    f"score.output={_RUN_DIR}/predictions",
    f"tune.output={_RUN_DIR}/tune",
    "output.log_format=json",  # one JSON object per progress line in the task logs
]


def stage_task(stage: str) -> SparkSubmitOperator:
    """`spark-submit jobs/<stage>.py --config CONF <overrides>` on the configured Spark connection."""
    return SparkSubmitOperator(
        task_id=stage,
        conn_id=SPARK_CONN_ID,
        application=f"{_HOME}/jobs/{stage}.py",
        application_args=["--config", _CONF, *OVERRIDES],
        py_files=_PY_FILES,
        name=f"sparkml_par-{stage}-{{{{ ds }}}}",
    )


with DAG(
    dag_id=DAG_ID,
    description="Spark data prep, Horovod training in a barrier stage, Spark scoring and the run report",
    schedule="@daily",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,  # two days at once would compete for the barrier stage's task slots
    default_args={"retries": 1, "retry_delay": timedelta(minutes=5)},
    tags=["sparkml_par"],
) as dag:
    tasks = [stage_task(stage) for stage in STAGES]
    for upstream, downstream in zip(tasks, tasks[1:]):
        upstream >> downstream
