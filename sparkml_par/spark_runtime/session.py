"""One SparkSession builder for every entry point.

On the embedded default (`local[N]`, `local-cluster[...]`) everything binds to loopback, so nothing
listens on a public interface. An already active session (a Databricks notebook, a spark-submit job
that built its own) is reused as is and never stopped by us.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, MutableMapping, Optional, Sequence

from sparkml_par.config import SparkConfig
from sparkml_par.errors import ConfigError, SparkmlParError
from sparkml_par.spark_runtime import worker_daemon
from sparkml_par.spark_runtime.class_archive import use_class_archive

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
SPARK_LOG_CONFIG = Path(__file__).with_name("spark_log4j2.properties")
SPARK_LOG_FILE_PROPERTY = "sparkml_par.spark_log"  # read by SPARK_LOG_CONFIG
# The names Spark's log4j2 looks for on its classpath, which holds Spark's conf directory.
_LOG4J2_FILES = ("log4j2.properties", "log4j2.xml", "log4j2.yaml", "log4j2.yml", "log4j2.json")
_SQL_SIMPLIFIED_TRACEBACK = "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"
# What the Python workers of a session that trains or scores import first (see session_settings).
TORCH_WORKERS = ("torch",)


def is_local_master(master: str) -> bool:
    return master == "local" or master.startswith(("local[", "local-cluster["))


def driver_runs_tasks(master: str) -> bool:
    """Whether the driver JVM is also the executor: `local` and `local[N]` (local-cluster has executors)."""
    return master == "local" or master.startswith("local[")


def session_settings(cfg: SparkConfig, worker_imports: Sequence[str] = ()) -> dict[str, str]:
    """Every setting the builder applies: ours first, then the user's spark.* settings win. worker_imports:
    modules the session's Python workers will import (torch, where it trains or scores)."""
    # The project logs stage, epoch and throughput itself; Spark's bar would break those lines on any master.
    settings = {
        "spark.app.name": cfg.app_name,
        "spark.master": cfg.master,
        "spark.ui.showConsoleProgress": "false",
        # pyspark records the Python call site of every Column function for Spark's error messages, with Py4J
        # round trips for each call; the project builds its expressions itself, a few per column, so a wide
        # input would pay those round trips many times over for call sites inside the project's own code.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
    }
    if cfg.conf.get(_SQL_SIMPLIFIED_TRACEBACK, "true").strip().lower() == "true":
        # Spark keeps a pool of Python workers per environment. Its SQL runners (mapInArrow: scoring, dataset
        # writes) add this variable, its RDD runners (the training barrier stage) do not, so without it scoring
        # after training starts workers of its own and imports torch again. Given to every Python function, it
        # makes one pool whose workers keep their imports. With SQL's simplified tracebacks turned off,
        # neither runner adds it: one pool, full tracebacks.
        settings["spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK"] = "1"
    if is_local_master(cfg.master):
        settings.update(
            {
                "spark.driver.host": LOOPBACK,
                "spark.driver.bindAddress": LOOPBACK,
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "8",
                # Executors of the embedded default run the driver's interpreter (the project's venv).
                "spark.pyspark.python": sys.executable,
                "spark.pyspark.driver.python": sys.executable,
            }
        )
    if driver_runs_tasks(cfg.master) and worker_imports:
        # The workers share the cores with the driver: the daemon imports them once, before it forks the workers.
        settings["spark.python.daemon.module"] = worker_daemon.__name__
        settings[f"spark.executorEnv.{worker_daemon.WORKER_IMPORTS}"] = ",".join(worker_imports)
    if cfg.use_gpu:
        settings.update(_gpu_settings(cfg))
    settings.update(cfg.conf)
    return settings


def _gpu_settings(cfg: SparkConfig) -> dict[str, str]:
    """One GPU per task. In local-cluster mode the workers discover the GPUs and lend them to executors."""
    if cfg.master.startswith("local") and not cfg.master.startswith("local-cluster["):
        raise ConfigError(
            f"spark.use_gpu: Spark's {cfg.master} master runs tasks in the driver and cannot assign GPUs to "
            f"them; use spark.master=local-cluster[1,<GPUs>,<MB>] on one machine, or a cluster with GPU executors"
        )
    settings = {
        "spark.executor.resource.gpu.amount": str(cfg.gpus_per_executor),
        "spark.task.resource.gpu.amount": "1",
    }
    if cfg.gpu_discovery_script:
        settings["spark.executor.resource.gpu.discoveryScript"] = cfg.gpu_discovery_script
    if cfg.master.startswith("local-cluster["):
        settings["spark.worker.resource.gpu.amount"] = str(cfg.gpus_per_executor)
        if cfg.gpu_discovery_script:
            settings["spark.worker.resource.gpu.discoveryScript"] = cfg.gpu_discovery_script
    return settings


def require_classic_session(spark, stage: str) -> None:
    """One error before any work on a Spark Connect session (pyspark-client, Databricks serverless and standard
    access mode): it has no SparkContext, so neither the barrier stages that start the ranks nor the JVM's
    Hadoop filesystem and job groups every stage uses."""
    kind = type(spark)
    if kind.__module__.startswith("pyspark.sql.connect"):
        raise SparkmlParError(
            f"{stage} needs a classic Spark session, and this one is a Spark Connect session "
            f"({kind.__module__}.{kind.__qualname__}), which has no SparkContext for barrier stages and "
            "Spark jobs; on Databricks run on a cluster in dedicated (single user) access mode, not serverless "
            "or standard access mode; elsewhere start the session without spark.remote / SPARK_REMOTE"
        )


def get_or_create_session(
    cfg: SparkConfig,
    log_file: Optional[Path] = None,
    input_bytes: Optional[int] = None,
    worker_imports: Sequence[str] = (),
):
    """Returns (session, created): an active session is reused, otherwise one is built from cfg.

    A session built here logs through the project's log4j2 config (spark_log4j2.properties), which also
    writes Spark's warnings and errors to `log_file` when one is given. `input_bytes`: the size of the input
    the session is for, where known before it starts (see driver_submit_opts); `worker_imports`: see
    session_settings.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        require_classic_session(active, "sparkml_par")
        master = active.sparkContext.master
        # Nothing silently dropped: name every requested setting the reused session does not have.
        ignored = [f"spark.master={cfg.master}"] if master != cfg.master else []
        ignored += [f"{key}={value}" for key, value in cfg.conf.items() if active.conf.get(key, None) != value]
        if ignored:
            log.info("reusing the active Spark session (master %s); not applied: %s", master, ", ".join(ignored))
        return active, False
    if is_local_master(cfg.master):
        # Read by the driver JVM and by local-cluster executors at start-up, before any setting applies.
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    use_driver_log_config(os.environ)
    archive = use_class_archive(os.environ)
    if archive is not None:
        log.debug("the driver JVM maps Spark's classes from %s", archive)
    builder = SparkSession.builder
    for key, value in session_settings(cfg, worker_imports).items():
        builder = builder.config(key, value)
    # For this JVM only: a later session's settings may choose a collector of their own.
    short = input_bytes is not None and input_bytes <= SHORT_RUN_INPUT_BYTES
    submit_opts = driver_submit_opts(cfg.master, cfg.conf.values(), os.environ, short_run=short)
    with _environment_variable("SPARK_SUBMIT_OPTS", submit_opts):
        session = builder.getOrCreate()
    require_classic_session(session, "sparkml_par")
    _configure_driver_log(session, log_file)
    _keep_per_query_code_at_c1(session.sparkContext)
    return session, True


@contextlib.contextmanager
def _environment_variable(name: str, value: Optional[str]) -> Iterator[None]:
    """os.environ[name] is value inside the block (unchanged when value is None), as it was after it."""
    before = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def users_log_config(env: Mapping[str, str]) -> bool:
    """Whether the user or the cluster set up Spark's log: -Dlog4j2.configurationFile in SPARK_SUBMIT_OPTS, or
    a log4j2 file in Spark's conf directory (SPARK_CONF_DIR, else SPARK_HOME/conf), which Spark reads itself."""
    if "log4j2.configurationFile" in env.get("SPARK_SUBMIT_OPTS", ""):
        return True
    conf_dir = spark_conf_dir(env)
    return conf_dir is not None and any(Path(conf_dir, name).is_file() for name in _LOG4J2_FILES)


def spark_conf_dir(env: Mapping[str, str]) -> Optional[Path]:
    """Spark's conf directory for a JVM started with env: SPARK_CONF_DIR, else SPARK_HOME/conf."""
    if env.get("SPARK_CONF_DIR"):
        return Path(env["SPARK_CONF_DIR"])
    return Path(env["SPARK_HOME"], "conf") if env.get("SPARK_HOME") else None


# On `local` and `local[N]` the driver JVM is also the executor: it runs every task of a batch job, where
# pause times matter less than the work done. Java picks G1 on any machine of two cores or more; its write
# barriers, remembered sets and concurrent marking cost a batch job time and memory, which the parallel
# collector, built for throughput, does not spend. The serial collector does as well on two cores, but collects
# with one thread on a machine of many.
THROUGHPUT_GC = "-XX:+UseParallelGC"
_CHOOSES_A_COLLECTOR = re.compile(r"-XX:\+Use\w*GC\b")
# Spark's classes pass Java's default metaspace threshold (about 21 MB) as such a driver loads them, and each time
# the JVM stops for a full collection that can unload none of them: the threshold starts above what they take.
METASPACE_THRESHOLD = "-XX:MetaspaceSize=256m"
_SETS_THE_METASPACE_THRESHOLD = re.compile(r"-XX:MetaspaceSize=")
# Such a driver's hot loops are its tasks', which a small input keeps short: its whole run ends before the code C2
# compiles pays back what compiling it takes from the machine's cores, while C1's code (tier 1, without the
# profiling tiered compilation runs first) is ready at once. Up to SHORT_RUN_INPUT_BYTES of input the driver
# compiles with C1 alone; on more, C2's code wins, but only where it runs long: at Java's thresholds C2 also
# compiles what Spark runs a few thousand times per query (planning, code generation, task deserialization), about
# half the driver's CPU time in a prepare. LATE_C2 raises C2's thresholds tenfold, so its compiles wait for
# code that runs on. Of what C2 still compiled, the longest compiles were of code Spark runs per query and never
# per row: Java's object streams (tasks, closures), ANTLR (SQL parsing), Janino (compiling the generated code)
# and ASM (closure cleaning, lambda classes). A driver started with LATE_C2 keeps them at C1's code, as
# COMPILER_DIRECTIVES lists them (see docs/performance.md).
QUICK_JIT = "-XX:TieredStopAtLevel=1"
LATE_C2 = (
    "-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
    "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000"
)
COMPILER_DIRECTIVES = Path(__file__).with_name("driver_compiler_directives.json")
# Set in a driver JVM that holds COMPILER_DIRECTIVES: a later session in the same JVM does not add them again.
_DIRECTIVES_PROPERTY = "sparkml_par.compiler_directives"
SHORT_RUN_INPUT_BYTES = 8 * 1024 * 1024
_CHOOSES_THE_COMPILERS = re.compile(
    r"-XX:(TieredStopAtLevel=|[+-]TieredCompilation\b|CompilationMode=|CompileThresholdScaling=|Tier4\w*Threshold=)"
)
# Where else a driver JVM's options come from: the JVM's own variables, and pyspark's spark-submit arguments.
_JAVA_OPTION_VARIABLES = (
    "SPARK_SUBMIT_OPTS",
    "JAVA_TOOL_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "_JAVA_OPTIONS",
    "PYSPARK_SUBMIT_ARGS",
)
_DRIVER_OPTION_SETTINGS = ("spark.driver.extraJavaOptions", "spark.driver.defaultJavaOptions")


def driver_submit_opts(
    master: str, settings: Iterable[str], env: Mapping[str, str], short_run: bool = False
) -> Optional[str]:
    """SPARK_SUBMIT_OPTS for a driver JVM of master started with env: when the driver runs the tasks,
    THROUGHPUT_GC added unless a collector is chosen already, METASPACE_THRESHOLD unless one is set, and unless the
    JIT compilers are chosen or tuned already QUICK_JIT for a short run (a small input), LATE_C2 for any other;
    None when nothing is added.
    settings: the other texts the driver's options may come from (the session's Spark settings, spark-submit's
    arguments).

    A JVM given two collectors does not start, so a collector chosen anywhere the driver's Java options come
    from wins: SPARK_SUBMIT_OPTS, the JVM's own option variables, settings, and the driver options of
    spark-defaults.conf; so do a metaspace threshold and a choice or tuning of the compilers. Other masters'
    drivers run no tasks and keep Java's choices; their executors' are the cluster's.
    """
    if not driver_runs_tasks(master):
        return None
    sources = [env.get(name, "") for name in _JAVA_OPTION_VARIABLES] + list(settings) + _spark_defaults_options(env)

    def unset(option: re.Pattern) -> bool:
        return not any(option.search(text) for text in sources)

    added = [THROUGHPUT_GC] if unset(_CHOOSES_A_COLLECTOR) else []
    added += [METASPACE_THRESHOLD] if unset(_SETS_THE_METASPACE_THRESHOLD) else []
    added += [QUICK_JIT if short_run else LATE_C2] if unset(_CHOOSES_THE_COMPILERS) else []
    if not added:
        return None
    return " ".join([env.get("SPARK_SUBMIT_OPTS", ""), *added]).strip()


def _keep_per_query_code_at_c1(sc) -> None:
    """Adds COMPILER_DIRECTIVES, once, to a driver JVM that runs with LATE_C2, through its diagnostic command
    Compiler.directives_add: the same directives given as a JVM option announce themselves on the driver's
    standard output. Each add pushes the directives on the JVM's stack again, so the JVM is marked."""
    from py4j.protocol import Py4JError

    system = sc._jvm.java.lang.System
    if system.getProperty(_DIRECTIVES_PROPERTY) is not None:
        return
    arguments = sc._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    if not set(LATE_C2.split()) <= set(arguments):
        return
    try:
        answer = diagnostic_command(sc, "compilerDirectivesAdd", str(COMPILER_DIRECTIVES))
    except Py4JError as exc:  # a JVM without HotSpot's diagnostic commands compiles as it would have
        log.debug("the driver JVM took no compiler directives: %s", exc)
        return
    system.setProperty(_DIRECTIVES_PROPERTY, str(COMPILER_DIRECTIVES))
    log.debug("the driver JVM: %s", answer.strip())


def diagnostic_command(sc, operation: str, *arguments: str) -> str:
    """The driver JVM's answer to one of its diagnostic commands, named as its MBean names them
    (compilerDirectivesAdd for jcmd's Compiler.directives_add). MBeanServer.invoke is called through the
    exported interface's Method: Py4J looks methods up on the server's own class, which Java does not export."""
    jvm, gateway = sc._jvm, sc._gateway

    def array(kind, items: Sequence) -> Any:
        made = gateway.new_array(kind, len(items))
        for i, item in enumerate(items):
            made[i] = item
        return made

    load = jvm.java.lang.Class.forName
    signature = ("javax.management.ObjectName", "java.lang.String", "[Ljava.lang.Object;", "[Ljava.lang.String;")
    classes = array(jvm.java.lang.Class, [load(name) for name in signature])
    invoke = load("javax.management.MBeanServer").getMethod("invoke", classes)
    server = jvm.java.lang.management.ManagementFactory.getPlatformMBeanServer()
    command = jvm.javax.management.ObjectName("com.sun.management:type=DiagnosticCommand")
    parameters = [array(jvm.java.lang.Object, [array(jvm.java.lang.String, list(arguments))])]
    call = [command, operation, *parameters, array(jvm.java.lang.String, ["[Ljava.lang.String;"])]
    return invoke.invoke(server, array(jvm.java.lang.Object, call))


def _spark_defaults_options(env: Mapping[str, str]) -> list[str]:
    """The driver Java option lines of spark-defaults.conf in Spark's conf directory, which spark-submit reads."""
    conf_dir = spark_conf_dir(env)
    if conf_dir is None:
        return []
    try:
        lines = Path(conf_dir, "spark-defaults.conf").read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if line.strip().startswith(_DRIVER_OPTION_SETTINGS)]


def use_driver_log_config(env: MutableMapping[str, str]) -> None:
    """A driver JVM started with env reads SPARK_LOG_CONFIG from its start: spark-class hands SPARK_SUBMIT_OPTS
    to the spark-submit JVM, which is the driver (pyspark starts one the same way). A user's or the cluster's
    own config wins; cluster-wide spark.driver.extraJavaOptions stay untouched."""
    if not users_log_config(env):
        options = env.get("SPARK_SUBMIT_OPTS", "")
        env["SPARK_SUBMIT_OPTS"] = f"{options} -Dlog4j2.configurationFile={SPARK_LOG_CONFIG.as_uri()}".strip()


def _configure_driver_log(session, log_file: Optional[Path]) -> None:
    """Reconfigures the running driver JVM's log4j2 from SPARK_LOG_CONFIG, unless the user chose a config."""
    jvm = session.sparkContext._jvm
    system = jvm.java.lang.System
    chosen = system.getProperty("log4j2.configurationFile")
    if chosen != SPARK_LOG_CONFIG.as_uri() and (chosen is not None or users_log_config(os.environ)):
        session.sparkContext.setLogLevel("WARN")
        return
    system.setProperty(SPARK_LOG_FILE_PROPERTY, str(log_file) if log_file else os.devnull)
    # Read again with the log file in place; also the first reading under spark-submit.
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    context.setConfigLocation(jvm.java.net.URI(SPARK_LOG_CONFIG.as_uri()))


# spark-submit's and the executor's exit code after an OutOfMemoryError (Spark's SparkExitCode.OOM).
_SPARK_OOM_EXIT = 52


@contextlib.contextmanager
def spark_session(
    cfg: SparkConfig,
    log_file: Optional[Path] = None,
    input_bytes: Optional[int] = None,
    worker_imports: Sequence[str] = (),
) -> Iterator:
    """A session for the duration of a job (`input_bytes`, `worker_imports`: see get_or_create_session);
    stopped afterwards only if this call created it.

    A driver JVM this process started that exits under the job (out of heap, killed) leaves pyspark with
    a lost connection and a chain of Py4J errors: the job's error says what happened and what to change.
    """
    session, created = get_or_create_session(cfg, log_file, input_bytes, worker_imports)
    lost_connections = _HeldLostConnections()
    logging.getLogger().addFilter(lost_connections)
    driver_lost = False
    try:
        yield session
    except Exception as exc:
        exit_code = _driver_exit_code(_EXIT_WAIT_S if _driver_may_be_exiting(exc) else 0)
        driver_lost = exit_code is None and not _driver_answers()
        if driver_lost:  # it no longer answers: on its way out, however long a loaded machine takes
            exit_code = _driver_exit_code(_LOST_DRIVER_EXIT_WAIT_S)
        if exit_code is not None:
            lost_connections.held.clear()  # the error below says why the connection was lost
            raise SparkmlParError(_driver_exit_message(cfg, exit_code)) from exc
        if created and not driver_lost:
            _cancel_and_await_tasks(session.sparkContext, _TASKS_END_WAIT_S)
        raise
    finally:
        logging.getLogger().removeFilter(lost_connections)
        lost_connections.release()
        if created and not driver_lost and _driver_exit_code(0) is None:
            session.stop()


class _HeldLostConnections(logging.Filter):
    """Holds the traceback py4j logs on the root logger when its connection to the driver JVM breaks,
    until the job's end says whether it is news: a driver JVM that exited under the job gets one error
    that says why, so the traceback is dropped; otherwise it is logged as it would have been."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list = []

    def filter(self, record: logging.LogRecord) -> bool:
        from py4j.protocol import Py4JNetworkError

        if record.exc_info and isinstance(record.exc_info[1], Py4JNetworkError):
            self.held.append(record)
            return False
        return True

    def release(self) -> None:
        for record in self.held:
            logging.getLogger().handle(record)
        self.held.clear()


# How long a failed job's session waits for its cancelled tasks to end before it stops.
_TASKS_END_WAIT_S = 10


def _cancel_and_await_tasks(sc, wait_s: float) -> None:
    """Cancels every job and waits until no executor runs a task, at most wait_s. A job fails as soon as it
    is cancelled, but its tasks end later; a task's end that reaches a stopped scheduler is logged as an
    ERROR with a Java stack trace on the console, above the job's own error (a barrier stage whose rank
    failed, on a loaded machine)."""
    from py4j.protocol import Py4JError

    try:
        sc.cancelAllJobs()
        deadline = time.monotonic() + wait_s
        while running_tasks(sc) > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    except Py4JError:  # a driver JVM that no longer answers: the job's own error is the one to report
        pass


def _driver_answers() -> bool:
    """Whether the driver JVM still answers a call, with its SparkContext running or stopped."""
    from py4j.protocol import Py4JError
    from pyspark import SparkContext

    try:
        SparkContext._gateway.jvm.java.lang.System.nanoTime()
    except (Py4JError, ConnectionError):
        return False
    return True


def running_tasks(sc) -> int:
    """Tasks running on all executors now, as Spark's status tracker counts them."""
    return sum(info.numRunningTasks() for info in sc._jsc.sc().statusTracker().getExecutorInfos())


# How long an error that may come from a dying driver JVM waits for it to finish exiting: Spark reports a
# task's OutOfMemoryError, failing the job, before its handler exits the JVM.
_EXIT_WAIT_S = 10
# How long a driver JVM that no longer answers may take to exit: its shutdown hooks on a loaded machine.
_LOST_DRIVER_EXIT_WAIT_S = 120
_DYING_DRIVER_SIGNS = ("OutOfMemoryError", "because SparkContext was shut down")


def _driver_may_be_exiting(exc: BaseException) -> bool:
    """Whether exc, or an error it was raised from or during, says the driver JVM may be going: a lost
    connection to it, an OutOfMemoryError, or the SparkContext shut down under the job (what Spark's handler
    of an uncaught error does before it exits the JVM). A job failing in a healthy JVM reports at once; the
    project's own errors say what went wrong already."""
    from py4j.protocol import Py4JNetworkError

    seen: Optional[BaseException] = exc
    while seen is not None and not isinstance(seen, SparkmlParError):
        if isinstance(seen, (ConnectionError, Py4JNetworkError)):
            return True
        try:
            text = str(seen)  # a Py4JJavaError asks the JVM for its stack trace
        except Exception:
            return True
        if any(sign in text for sign in _DYING_DRIVER_SIGNS):
            return True
        seen = seen.__cause__ if seen.__cause__ is not None or seen.__suppress_context__ else seen.__context__
    return False


def _driver_exit_code(wait_s: float) -> Optional[int]:
    """The exit code of the driver JVM this process started once it has exited, waiting up to wait_s for
    it; None while it runs, or when another process started it (spark-submit, a notebook's cluster)."""
    import subprocess

    from pyspark import SparkContext

    process = getattr(SparkContext._gateway, "proc", None)
    if process is None:
        return None
    try:
        return process.wait(wait_s)
    except subprocess.TimeoutExpired:
        return None


def _driver_exit_message(cfg: SparkConfig, exit_code: int) -> str:
    if exit_code == _SPARK_OOM_EXIT:
        runs_tasks = " (on a local master it also runs every task)" if driver_runs_tasks(cfg.master) else ""
        return (
            f"Spark's driver JVM ran out of heap (java.lang.OutOfMemoryError, exit code {exit_code}) and exited"
            f"{runs_tasks}; give it a bigger heap with spark.conf.spark.driver.memory (e.g. "
            f"spark.conf.spark.driver.memory=8g)"
        )
    if exit_code < 0:
        name = signal.Signals(-exit_code).name if -exit_code in signal.valid_signals() else str(-exit_code)
        return (
            f"Spark's driver JVM was killed by signal {name} during the job; a SIGKILL is most often the system's "
            f"out-of-memory killer: lower spark.conf.spark.driver.memory or the work beside it, or use a bigger machine"
        )
    return f"Spark's driver JVM exited with code {exit_code} during the job; Spark's log lines above say why"


def run_stage(
    cfg,
    work: Callable[[Any], Any],
    summarize: Callable[[Any], str],
    input_bytes: Optional[int] = None,
    worker_imports: Sequence[str] = (),
) -> int:
    """A CLI stage: its work in a session for cfg.spark (an active one is reused; `input_bytes`,
    `worker_imports`: see get_or_create_session), then its summary."""
    with spark_session(cfg.spark, input_bytes=input_bytes, worker_imports=worker_imports) as spark:
        result = work(spark)
    print(summarize(result))
    return 0
