"""The `sparkml-par` command line, its logging setup and `doctor`'s checks."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparkml_par import __version__, cli, doctor
from sparkml_par.config import describe, load_config
from sparkml_par.errors import SparkmlParError
from sparkml_par.logs import setup_logging
from sparkml_par.spark_runtime import class_archive

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = str(REPO / "conf" / "quickstart.yaml")
COMPONENTS = ["Python", "Java", "Spark", "torch", "Horovod", "petastorm", "pyarrow", "numpy", "MLflow", "class-archive"]

received = []


def record_config(cfg) -> int:
    """A stage plugged into COMMANDS by the tests: keeps the config it was given."""
    received.append(cfg)
    return 3


def fail_with_user_error(cfg) -> int:
    raise SparkmlParError("num_proc=4 but the cluster has 2 task slots;\nlower train.num_proc")


def crash(cfg) -> int:
    raise RuntimeError("a bug, not a user error")


@pytest.fixture(autouse=True)
def _restore_root_logger():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def stage(monkeypatch):
    """Registers a test function as a command, the one line a real stage adds to COMMANDS."""

    def register(name, function):
        monkeypatch.setitem(cli.COMMANDS, name, (f"{__name__}:{function.__name__}", "test stage"))

    received.clear()
    return register


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"sparkml-par {__version__}\n"


def test_no_command_is_a_usage_error(capsys):
    assert cli.main([]) == 2
    assert "the following arguments are required: COMMAND" in capsys.readouterr().err


def test_smoke_is_registered_lazily():
    assert cli.COMMANDS["smoke"][0] == "sparkml_par.smoke:run"
    assert "smoke" in cli.build_parser().format_help()


def test_config_prints_the_effective_config_with_overrides(capsys):
    assert cli.main(["config", QUICKSTART, "train.epochs=7", "spark.conf.spark.sql.shuffle.partitions=3"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["train"]["epochs"] == 7
    assert printed["train"]["model"] == "cnn"  # from the file
    assert printed["spark"]["conf"] == {"spark.sql.shuffle.partitions": "3"}
    assert printed == load_config(QUICKSTART, ["train.epochs=7", "spark.conf.spark.sql.shuffle.partitions=3"]).to_dict()


def test_quiet_and_log_format_flags_set_output_keys(capsys):
    assert cli.main(["config", QUICKSTART, "--quiet", "--log-format", "json"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["output"] == {
        "run_dir": "runs/quickstart",
        "log_format": "json",
        "quiet": True,
        "from_stage": None,
    }


def test_run_takes_the_stage_to_start_from(capsys):
    assert cli.main(["config", QUICKSTART, "output.from_stage=train"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["output"]["from_stage"] == "train"
    assert cli.build_parser().parse_args(["run", QUICKSTART, "--from", "score"]).from_stage == "score"


def test_config_reference_lists_every_key(capsys):
    assert cli.main(["config", "--reference"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [key for key, _, _ in describe()]
    assert any(line.split() == ["train.epochs", "5", "Passes", "over", "the", "train", "split."] for line in lines)


def test_the_config_reference_page_is_current(capsys):
    assert cli.main(["config", "--reference", "--markdown"]) == 0
    page = capsys.readouterr().out
    assert (Path(__file__).parents[1] / "docs" / "config-reference.md").read_text() == page, (
        "docs/config-reference.md is not the config's reference: run `make docs`"
    )
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [key for key, _, _ in describe()]
    assert "| `train.min_proc` | `0` |" in page


def test_config_without_a_file(capsys):
    assert cli.main(["config"]) == 2
    assert capsys.readouterr().err == (
        "error: config needs CONF, a YAML file such as conf/quickstart.yaml, or --reference\n"
    )


def test_bad_override_exits_2_with_one_error_line(capsys):
    assert cli.main(["config", QUICKSTART, "train.optimizer=adamm"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "error: train.optimizer: 'adamm' is not allowed (did you mean 'adam'?); choose one of 'sgd', 'adam', 'adamw'\n"
    )


def test_stage_gets_the_loaded_config_and_returns_its_code(stage):
    stage("probe", record_config)
    assert cli.main(["probe", QUICKSTART, "train.epochs=2", "--quiet"]) == 3
    (cfg,) = received
    assert (cfg.train.epochs, cfg.train.model, cfg.output.quiet) == (2, "cnn", True)
    assert logging.getLogger().level == logging.WARNING


def test_stage_needs_a_config_file(stage, capsys):
    stage("probe", record_config)
    assert cli.main(["probe"]) == 2
    assert "the following arguments are required: CONF" in capsys.readouterr().err
    assert received == []


def test_user_error_in_a_stage_is_printed_without_a_traceback(stage, capsys):
    # The message's own lines are kept: a failed rank's error carries its remote traceback.
    stage("probe", fail_with_user_error)
    assert cli.main(["probe", QUICKSTART]) == 2
    assert capsys.readouterr().err == ("error: num_proc=4 but the cluster has 2 task slots;\nlower train.num_proc\n")


def test_other_exceptions_propagate(stage):
    stage("probe", crash)
    with pytest.raises(RuntimeError, match="a bug, not a user error"):
        cli.main(["probe", QUICKSTART])


def test_console_entry_point_in_a_fresh_interpreter(tmp_path):
    """Exit code and stderr as a shell sees them, and no heavy import just to read a config."""
    missing = tmp_path / "missing.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "sparkml_par.cli", "config", str(missing)], capture_output=True, text=True, cwd=REPO
    )
    message = f"error: config file {str(missing)!r} does not exist; pass a YAML file such as conf/quickstart.yaml\n"
    assert proc.returncode == 2 and proc.stderr == message
    # The installed command ends the same way.
    installed = Path(sys.executable).parent / "sparkml-par"
    proc = subprocess.run([str(installed), "config", str(missing)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and proc.stderr == message
    version = subprocess.run([str(installed), "--version"], capture_output=True, text=True, cwd=REPO)
    assert version.returncode == 0 and __version__ in version.stdout
    probe = (
        "import sys; from sparkml_par.cli import main; main(['config', '--reference']); "
        "print(sorted(m for m in ('torch', 'pyspark', 'horovod', 'sparkml_par.smoke') if m in sys.modules), "
        "file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0 and proc.stderr == "[]\n"


# --- logging -----------------------------------------------------------------------------------


def test_text_logging(capsys):
    setup_logging(quiet=False, fmt="text")
    logging.getLogger("sparkml_par.test").info("epoch %d done", 3)
    logging.getLogger("sparkml_par.test").debug("hidden")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(" INFO sparkml_par.test: epoch 3 done")


def test_json_logging(capsys):
    setup_logging(quiet=False, fmt="json")
    logging.getLogger("sparkml_par.test").warning("slow rank %s", "1")
    record = json.loads(capsys.readouterr().err)
    assert {k: record[k] for k in ("level", "logger", "message")} == {
        "level": "WARNING",
        "logger": "sparkml_par.test",
        "message": "slow rank 1",
    }


def test_quiet_logging_keeps_warnings_only_and_setup_replaces_itself(capsys):
    setup_logging(quiet=False, fmt="text")
    setup_logging(quiet=True, fmt="text")
    logging.getLogger("sparkml_par.test").info("progress")
    logging.getLogger("sparkml_par.test").warning("careful")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].endswith("WARNING sparkml_par.test: careful")


# --- doctor --------------------------------------------------------------------------------------


@pytest.mark.stack
def test_doctor_lists_every_component(capsys):
    code = cli.main(["doctor"])
    lines = capsys.readouterr().out.splitlines()
    component_lines = [line for line in lines if not line.startswith(" ")][:-1]
    assert [line.split()[1] for line in component_lines] == COMPONENTS
    # This checkout's environment is built by `make setup`: every check passes.
    assert code == 0, "\n".join(lines)
    assert all(line.startswith("ok ") for line in component_lines)
    # The stack this environment holds: the pinned one (make setup) or the current one (STACK=current).
    constraints = doctor.find_constraints()
    assert lines[-1] == f"compared with the pins of the {doctor.stack_name(constraints)} stack in {constraints}; " + (
        "the stack can run"
    )
    horovod_line = component_lines[COMPONENTS.index("Horovod")]
    import torch

    built_for = torch.__version__.replace("+", ".")
    assert f"0.28.1 (built against torch {built_for}), PyTorch yes, Gloo yes" in horovod_line
    # make setup wrote the driver JVM's class-data archive for this environment's JDK and Spark.
    archive_line = component_lines[COMPONENTS.index("class-archive")]
    assert archive_line.endswith(f"the driver JVM maps Spark's classes from {class_archive.usable_archive()}")


@pytest.mark.stack
def test_doctor_reads_the_pins_of_the_checkout():
    pinned = doctor.read_pins(REPO / "constraints.txt")
    assert pinned["pyarrow"] == "14.0.2" and pinned["horovod"] == "0.28.1" and pinned["pyspark"].startswith("4.0.")
    current = doctor.read_pins(REPO / "constraints-current.txt")
    assert current.file == "constraints-current.txt" and current["pyspark"].startswith("4.3.")
    assert current["horovod"] == pinned["horovod"] and current["numpy"].startswith("2.")
    # The environment's pyspark, pyarrow and torch name its stack.
    import pyarrow
    import pyspark
    import torch

    holds = doctor.read_pins(doctor.find_constraints())
    installed = (pyspark.__version__, pyarrow.__version__, torch.__version__.split("+")[0])
    assert (holds["pyspark"], holds["pyarrow"], holds["torch"]) == installed


def test_doctor_names_the_pinned_stack_when_the_environment_holds_neither(tmp_path):
    for name in doctor.STACKS.values():
        (tmp_path / name).write_text("pyspark==3.5.0\npyarrow==12.0.0\n")
    assert doctor.find_constraints(tmp_path) == tmp_path / "constraints.txt"
    assert doctor.find_constraints(tmp_path / "missing") is None


PINNED = doctor.Pins({"pyarrow": "14.0.2", "torch": "2.13.0"})
CURRENT = doctor.Pins({"pyarrow": "25.0.1"}, "constraints-current.txt")


@pytest.mark.parametrize(
    "dist, version, pins, problem",
    [
        ("pyarrow", "14.0.2", PINNED, None),
        ("pyarrow", "25.0.1", CURRENT, None),
        ("pyarrow", "15.0.0", PINNED, "constraints.txt pins pyarrow==14.0.2"),
        ("pyarrow", "14.0.2", CURRENT, "constraints-current.txt pins pyarrow==25.0.1"),
        ("pyarrow", "19.0.1", None, None),
        ("pyarrow", "26.0.1", None, "pyarrow 14.0 to 25.x is required: the pipeline is tested on pyarrow 14 to 25"),
        ("numpy", "2.4.6", None, None),
        ("numpy", "1.23.5", None, None),
        ("numpy", "1.22.4", None, "numpy 1.23 to 2.x is required: the pipeline is tested on numpy 1.23 to 2.4"),
        ("pyspark", "4.3.0", None, None),
        ("pyspark", "3.5.1", None, None),
        (
            "pyspark",
            "4.4.1",
            None,
            "pyspark 3.5 to 4.3 is required: the pipeline is tested on Spark 3.5.0 to 4.3",
        ),
        (
            "pyspark",
            "3.4.1",
            None,
            "pyspark 3.5 to 4.3 is required: the pipeline is tested on Spark 3.5.0 to 4.3",
        ),
        ("torch", "2.2.2", None, "torch 2.3 to 2.x is required: the pipeline is tested on torch 2.3 to 2.14"),
        ("mlflow", "2.13.2", None, None),
        ("pyspark", "4.00.1", None, None),
        ("torch", "2.13.0+cu121", PINNED, None),
    ],
)
def test_version_problem(dist, version, pins, problem):
    assert doctor.version_problem(dist, version, pins) == problem


@pytest.mark.parametrize("version", [(3, 11, 7), (3, 12, 1), (3, 13, 0)])
def test_python_of_a_tested_stack(version):
    assert doctor.check_python(version).ok


@pytest.mark.parametrize("version", [(3, 10, 13), (3, 14, 0)])
def test_python_outside_the_tested_stacks(version):
    result = doctor.check_python(version)
    assert (result.ok, result.detail) == (
        False,
        f"{'.'.join(map(str, version))}; Python 3.11 to 3.13 is required (the tested stacks run 3.11, 3.12 and 3.13)",
    )
    assert result.fix == "create the environment with one of them: `make clean setup PYTHON=python3.12`"


@pytest.mark.parametrize(
    "output, major",
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('openjdk version "21" 2023-09-19', 21),
        ('java version "1.8.0_392"', 8),
        ("no version here", None),
    ],
)
def test_parse_java_major(output, major):
    assert doctor.parse_java_major(output) == major


def _fake_java_home(tmp_path: Path, version_line: str) -> Path:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return java.parent.parent


def test_java_home_is_honoured_and_old_java_fails(tmp_path):
    home = _fake_java_home(tmp_path, 'openjdk version "11.0.22" 2024-01-16')
    result = doctor.check_java({**os.environ, "JAVA_HOME": str(home)})
    assert result == doctor.CheckResult(
        "Java",
        False,
        f"11.0.22 ({home}/bin/java); Spark 4 needs Java 17 or newer",
        "install Java 17 and set JAVA_HOME to it",
    )


def test_java_home_without_java(tmp_path):
    result = doctor.check_java({"JAVA_HOME": str(tmp_path), "PATH": ""})
    assert (result.ok, result.detail) == (False, f"JAVA_HOME={tmp_path} has no bin/java")


def test_java_not_on_path(tmp_path):
    result = doctor.check_java({"PATH": str(tmp_path)})
    assert (result.ok, result.detail) == (False, "java not found on PATH")
    assert result.fix.startswith("install Java 17")


def test_this_machines_java():
    result = doctor.check_java()
    assert result.ok, result
    assert doctor.parse_java_major(f'version "{result.detail.split()[0]}"') >= 17


def test_package_that_does_not_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "petastorm", None)  # how Python marks a module as not importable
    pins = doctor.Pins({"petastorm": "0.12.1"}, "constraints-current.txt")
    assert doctor.check_package("petastorm", "petastorm", pins) == doctor.CheckResult(
        "petastorm",
        False,
        "petastorm does not import: ModuleNotFoundError: import of petastorm halted; None in sys.modules",
        "install the pinned version: `pip install -c constraints-current.txt petastorm==0.12.1`",
    )
    assert doctor.check_package("petastorm", "petastorm", None).fix == (
        "install a supported version: `pip install 'petastorm>=0.12,<0.13'`"
    )


def test_a_petastorm_that_imports_pyarrow_filesystem_is_sent_to_petastorm_0_12_1(tmp_path, monkeypatch):
    # What petastorm 0.12.1 as released does on pyarrow >= 15 (petastorm/utils.py).
    (tmp_path / "petastorm").mkdir()
    (tmp_path / "petastorm" / "__init__.py").write_text("from pyarrow.filesystem import LocalFileSystem\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "petastorm" or m.startswith("petastorm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow.filesystem", None)
    result = doctor.check_package("petastorm", "petastorm", None)
    assert (result.ok, result.fix) == (False, doctor.PETASTORM_FIX)
    assert "pyarrow.filesystem" in result.detail


def test_horovod_without_pytorch_support(monkeypatch):
    monkeypatch.setitem(sys.modules, "horovod.torch", None)
    result = doctor.check_horovod(doctor.Pins({"horovod": "0.28.1"}))
    assert (result.ok, result.fix) == (False, doctor.HOROVOD_FIX)
    assert re.match(
        r"0\.28\.1 \(built against torch [^)]+\) without PyTorch support: horovod.torch does not import", result.detail
    )


def test_horovod_built_against_another_torch_is_sent_to_the_build_script(monkeypatch):
    import horovod
    import torch

    monkeypatch.setattr(horovod, "__version__", "0.28.1+torch2.3.1.cu121")
    monkeypatch.setattr(torch, "__version__", "2.6.0+cu124")
    result = doctor.check_horovod(doctor.Pins({"horovod": "0.28.1"}))
    assert not result.ok
    assert result.detail == "0.28.1 built against torch 2.3.1.cu121, but this environment imports torch 2.6.0+cu124"
    assert result.fix.startswith("rebuild it against this torch: scripts/build_horovod.sh PYTHON")


def test_report_exit_code_follows_the_checks(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    out = io.StringIO()
    assert doctor.report(out) == 1
    lines = out.getvalue().splitlines()
    at = [line.split()[1] for line in lines].index("pyarrow")
    assert re.match(r"FAIL  pyarrow +pyarrow does not import: ModuleNotFoundError", lines[at])
    pins = doctor.read_pins(doctor.find_constraints())
    fix = f"install the pinned version: `pip install -c {pins.file} pyarrow=={pins['pyarrow']}`"
    assert lines[at + 1] == f"      fix: {fix}"
    assert lines[-1].endswith("problem(s): the stack cannot run")


def test_doctor_asks_the_tracking_server_it_is_pointed_at():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    result = doctor.check_mlflow(None, {"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}"})
    assert not result.ok
    assert f"the tracking server MLFLOW_TRACKING_URI=http://127.0.0.1:{port} does not answer" in result.detail
    assert doctor.check_mlflow(None, {}).ok
