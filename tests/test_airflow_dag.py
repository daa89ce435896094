"""jobs/airflow_dag.py loads in a real Airflow 2.10 and 3.3 with their Spark providers, as the scheduler would.

Each Airflow lives in its own virtual environment (scripts/airflow_venv.sh creates it once at
tests/.venv-airflow or tests/.venv-airflow3 and reuses it), with a fresh AIRFLOW_HOME and metadata
database per test run. A probe script run by that venv loads the DAG folder with DagBag, renders each
task's templates for one run date, builds the spark-submit command line the provider would run, and
prints it all as JSON. Every test that needs Airflow runs once per major version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENVS = {2: ROOT / "tests" / ".venv-airflow", 3: ROOT / "tests" / ".venv-airflow3"}
DAG_FILE = ROOT / "jobs" / "airflow_dag.py"
RUN_DATE = "2024-06-01"

pytestmark = pytest.mark.slow

# Airflow 3 moved DagBag to airflow.dag_processing.dagbag, without include_examples (core.load_examples
# decides), and VariableAccessor to the task SDK (airflow.utils.context's is deprecated); its DAG has no
# schedule_interval but schedule, and its cron timetable no summary but expression.
PROBE = r"""
import json, sys
import airflow

AIRFLOW_2 = airflow.__version__.startswith("2.")
if AIRFLOW_2:
    from airflow.models import DagBag
    from airflow.utils.context import VariableAccessor

    bag = DagBag(dag_folder=sys.argv[1], include_examples=False)
else:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.execution_time.context import VariableAccessor

    bag = DagBag(dag_folder=sys.argv[1])
result = {"import_errors": {path: str(error) for path, error in bag.import_errors.items()},
          "dag_ids": sorted(bag.dag_ids), "tasks": {}}
dag = bag.dags.get("sparkml_par_pipeline")
if dag is not None:
    result.update(version=airflow.__version__, catchup=dag.catchup, max_active_runs=dag.max_active_runs,
                  schedule=str(dag.schedule_interval if AIRFLOW_2 else dag.schedule),
                  cron=dag.timetable.summary if AIRFLOW_2 else dag.timetable.expression)
    context = {"ds": sys.argv[2], "var": {"value": VariableAccessor(deserialize_json=False)}}
    for task in dag.topological_sort():
        for name in task.template_fields:
            setattr(task, name, task.render_template(getattr(task, name), context))
        hook = task._get_hook()
        result["tasks"][task.task_id] = {
            "operator": type(task).__name__, "conn_id": task._conn_id,
            "downstream": sorted(task.downstream_task_ids), "upstream": sorted(task.upstream_task_ids),
            "command": hook._build_spark_submit_command(task.application)}
print("PROBE " + json.dumps(result))
"""


@pytest.fixture(scope="module", params=sorted(VENVS), ids=lambda major: f"airflow{major}")
def airflow_major(request) -> int:
    return request.param


@pytest.fixture(scope="module")
def airflow_python(airflow_major) -> Path:
    """The Airflow venv's interpreter; created by scripts/airflow_venv.sh (minutes the first time)."""
    venv = VENVS[airflow_major]
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "airflow_venv.sh"), str(venv), str(airflow_major)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/airflow_venv.sh exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return venv / "bin" / "python"


@pytest.fixture(scope="module")
def airflow_home(airflow_python, tmp_path_factory) -> Path:
    """A fresh AIRFLOW_HOME with a migrated SQLite metadata database (Variables are looked up there)."""
    home = tmp_path_factory.mktemp("airflow_home")
    done = subprocess.run(
        [str(airflow_python), "-m", "airflow", "db", "migrate"],
        env=_airflow_env(home),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return home


def _airflow_env(home: Path, **variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHON", "SPARK_", "PYSPARK"))}
    env.update(
        AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False", AIRFLOW__CORE__DAGS_FOLDER=str(DAG_FILE.parent)
    )
    # Airflow reads AIRFLOW_VAR_<NAME> before its database: how a deployment (or this test) sets Variables.
    env.update({f"AIRFLOW_VAR_{name.upper()}": value for name, value in variables.items()})
    return env


def _probe(airflow_python: Path, home: Path, tmp_path: Path, **variables: str) -> dict:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = _airflow_env(home, **variables)
    # The connections the DAG may name, as Airflow reads them from the environment.
    env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps(
        {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "client"}}
    )
    env["AIRFLOW_CONN_SPARK_TEST"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    done = subprocess.run(
        [str(airflow_python), str(script), str(DAG_FILE), RUN_DATE],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("PROBE "))


def _overrides(root: str) -> list[str]:
    run = f"{root}/{RUN_DATE}"
    return [
        f"output.run_dir={run}",
        f"data.output={run}/dataset",
        f"train.output={run}/model",
        f"score.output={run}/predictions",
        f"tune.output={run}/tune",
        "output.log_format=json",
    ]


def test_dag_loads_with_stage_tasks_in_order_and_default_settings(
    airflow_major, airflow_python, airflow_home, tmp_path
):
    result = _probe(airflow_python, airflow_home, tmp_path)

    assert result["import_errors"] == {}
    assert result["version"].startswith(f"{airflow_major}.")
    assert result["dag_ids"] == ["sparkml_par_pipeline"]
    assert (result["schedule"], result["cron"]) == ("@daily", "0 0 * * *")
    assert result["catchup"] is False and result["max_active_runs"] == 1
    tasks = result["tasks"]
    assert list(tasks) == ["prepare", "train", "score", "report"]
    assert [tasks[t]["downstream"] for t in tasks] == [["train"], ["score"], ["report"], []]
    assert [tasks[t]["upstream"] for t in tasks] == [[], ["prepare"], ["train"], ["score"]]
    for stage, task in tasks.items():
        assert task["operator"] == "SparkSubmitOperator" and task["conn_id"] == "spark_default"
        command = task["command"]
        assert command[:3] == ["spark-submit", "--master", "yarn"]
        assert command[command.index("--name") + 1] == f"sparkml_par-{stage}-{RUN_DATE}"
        assert "--py-files" not in command  # none configured
        tail = [
            str(ROOT / "jobs" / f"{stage}.py"),
            "--config",
            str(ROOT / "conf" / "quickstart.yaml"),
            *_overrides("/tmp/sparkml_par/runs"),
        ]
        assert command[-len(tail) :] == tail, command
        assert (ROOT / "jobs" / f"{stage}.py").is_file()


def test_variables_choose_connection_config_outputs_and_py_files(airflow_python, airflow_home, tmp_path):
    result = _probe(
        airflow_python,
        airflow_home,
        tmp_path,
        sparkml_par_spark_conn_id="spark_test",
        sparkml_par_home="/opt/sparkml_par",
        sparkml_par_conf="/etc/sparkml_par/tabular.yaml",
        sparkml_par_output_root="/shared/runs",
        sparkml_par_py_files="/opt/sparkml_par/dist/pkg.zip",
    )

    assert result["import_errors"] == {}
    command = result["tasks"]["train"]["command"]
    assert result["tasks"]["train"]["conn_id"] == "spark_test"
    assert command[:3] == ["spark-submit", "--master", "local[2]"]
    assert command[command.index("--py-files") + 1] == "/opt/sparkml_par/dist/pkg.zip"
    tail = ["/opt/sparkml_par/jobs/train.py", "--config", "/etc/sparkml_par/tabular.yaml", *_overrides("/shared/runs")]
    assert command[-len(tail) :] == tail, command


def test_the_dag_module_imports_nothing_airflow_lacks():
    """Cheap check without the venv: the DAG file imports only Airflow, the provider and the standard library."""
    import ast

    imported = set()
    for node in ast.walk(ast.parse(DAG_FILE.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= {"__future__", "airflow", "datetime", "pathlib"} | set(sys.stdlib_module_names)
