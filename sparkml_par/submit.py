"""`sparkml-par-submit`: spark-submit with this environment's Spark and Python, from any shell.

pyspark's own `bin/spark-submit` finds its Spark by running whatever `python3` is first on PATH, and
spark-submit then runs the job script, and the executors, with `python3` too: from a shell where this
environment is not activated both are some other interpreter, and the submit fails before Spark starts.
This wrapper names the interpreter it runs under (unless the user named one), starts the driver JVM
with the project's log4j2 config (Spark's INFO start-up lines stay out of the console) and, on a local
master, the parallel garbage collector (sparkml_par.spark_runtime.session.driver_submit_opts), and runs pyspark's
spark-submit with the arguments unchanged.

spark-submit merges a Python job's stderr into its stdout; the job points its stderr back at the JVM's
(logs.stderr_apart_under_spark_submit), which this wrapper makes a pipe it copies to its own stderr,
so log and error lines reach stderr whatever it is (a terminal, a pipe, a file).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import NoReturn, Optional, Sequence

from sparkml_par.spark_runtime.session import LOOPBACK, driver_submit_opts, is_local_master, use_driver_log_config


def submit_environment(environ: dict[str, str], args: Sequence[str]) -> dict[str, str]:
    """The environment for pyspark's spark-submit: SPARK_HOME, the Python interpreters, the driver's log4j2
    config and, for a local master, the loopback address (as sparkml_par.spark_runtime.session binds it) and the
    parallel garbage collector (session.driver_submit_opts), each unless set."""
    import pyspark

    env = dict(environ)
    master = _argument(args, "--master") or "local[*]"  # spark-submit's default
    if is_local_master(master):
        env.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    env.setdefault("SPARK_HOME", str(Path(pyspark.__file__).parent))
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
    use_driver_log_config(env)
    submit_opts = driver_submit_opts(master, [*args, *_properties_file(args)], env)
    if submit_opts is not None:
        env["SPARK_SUBMIT_OPTS"] = submit_opts
    return env


def _argument(args: Sequence[str], name: str) -> Optional[str]:
    """The value of spark-submit's option name (`--name value` or `--name=value`), None when not given."""
    for index, arg in enumerate(args):
        if arg == name and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith(f"{name}="):
            return arg.partition("=")[2]
    return None


def _properties_file(args: Sequence[str]) -> list[str]:
    """The lines of the --properties-file spark-submit reads, if one is named and readable."""
    path = _argument(args, "--properties-file")
    try:
        return Path(path).read_text(errors="replace").splitlines() if path else []
    except OSError:
        return []


def main(argv: Optional[Sequence[str]] = None) -> NoReturn:
    args = list(sys.argv[1:] if argv is None else argv)
    env = submit_environment(dict(os.environ), args)
    spark_submit = str(Path(env["SPARK_HOME"], "bin", "spark-submit"))
    child = subprocess.Popen([spark_submit, *args], env=env, stderr=subprocess.PIPE)
    # Ctrl-C reaches spark-submit through the terminal's process group; a scheduler's SIGTERM is passed on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, _frame: child.send_signal(signum))
    copier = threading.Thread(target=_copy, args=(child.stderr, sys.stderr.buffer), name="stderr", daemon=True)
    copier.start()
    code = child.wait()
    copier.join()
    sys.stderr.flush()
    sys.exit(code)


def _copy(source, target) -> None:
    """Whatever arrives, as it arrives: a log line is seen when it is written."""
    for chunk in iter(lambda: source.read1(65536), b""):
        target.write(chunk)
        target.flush()
