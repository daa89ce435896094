"""`sparkml-par doctor`: is this machine's stack one that runs the pipeline, and if not, what to do.

The tested stacks are the pinned one (constraints.txt) and those in constraints-NAME.txt (current, the
Databricks LTS ML runtimes, and cuda). In a repository checkout the versions are compared with the pins of the
stack the environment holds (the one whose pyspark, pyarrow and torch pins it has); in an installed package,
with the ranges every stack covers. Most failures come from a package that drifted, or from a Horovod built
for another torch.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, TextIO

HOROVOD_FIX = (
    "run `make setup`, which builds Horovod with scripts/build_horovod.sh "
    "(run the script directly when setup already ran)"
)
PETASTORM_FIX = (
    "petastorm as released imports pyarrow.filesystem, gone in pyarrow 15; sparkml_par makes petastorm 0.12.1 "
    "import there: `pip install petastorm==0.12.1`"
)

# The tested stacks, by the constraints file of a checkout that pins each.
STACKS = {
    "pinned": "constraints.txt",
    **{
        name: f"constraints-{name}.txt"
        for name in ("current", "databricks-15.4", "databricks-16.4", "databricks-17.3", "cuda")
    },
}
# What decides which stack an environment holds (the cuda stack is the pinned one but for torch).
STACK_MARKERS = ("pyspark", "pyarrow", "torch")

# Versions each package may have, as major.minor from (inclusive) to (exclusive), and why: what is
# checked when no constraints file is at hand. Every stack lies inside.
SUPPORTED: dict[str, tuple[tuple[int, int], tuple[int, int], str]] = {
    "pyspark": ((3, 5), (4, 4), "the pipeline is tested on Spark 3.5.0 to 4.3"),
    "torch": ((2, 3), (3, 0), "the pipeline is tested on torch 2.3 to 2.14"),
    "horovod": ((0, 28), (0, 29), "the launcher is written against Horovod 0.28's Gloo rendezvous"),
    "petastorm": ((0, 12), (0, 13), "sparkml_par makes petastorm 0.12.1 import on pyarrow >= 15 and numpy 2"),
    "pyarrow": ((14, 0), (26, 0), "the pipeline is tested on pyarrow 14 to 25"),
    "numpy": ((1, 23), (3, 0), "the pipeline is tested on numpy 1.23 to 2.4"),
    "mlflow": ((2, 13), (4, 0), "the tracking client and the pyfunc model are tested on MLflow 2.13 to 3.17"),
}


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def find_constraints(root: Optional[Path] = None) -> Optional[Path]:
    """The constraints file of the stack this environment holds, in a repository checkout (None in an install).

    The stack whose pyspark and pyarrow pins the installed versions match; the pinned stack when none does
    (its pins then name what to install).
    """
    root = root or Path(__file__).resolve().parent.parent
    files = [root / name for name in STACKS.values() if (root / name).is_file()]
    for path in files:
        pins = read_pins(path)
        if all(_installed(dist) == pins.get(dist) for dist in STACK_MARKERS):
            return path
    return files[0] if files else None


def stack_name(path: Path) -> str:
    return next((name for name, file in STACKS.items() if file == path.name), path.name)


def _installed(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist).split("+", 1)[0]
    except importlib.metadata.PackageNotFoundError:
        return None


class Pins(dict):
    """A stack's exact versions by distribution name, and the name of the constraints file holding them."""

    def __init__(self, versions: Mapping[str, str], file: str = STACKS["pinned"]):
        super().__init__(versions)
        self.file = file


def read_pins(path: Path) -> Pins:
    pins = {}
    for line in path.read_text().splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep:
            pins[name.strip().lower()] = version.strip()
    return Pins(pins, path.name)


def version_problem(dist: str, version: str, pins: Optional[Pins]) -> Optional[str]:
    """Why this version of dist does not fit the stack, or None when it does."""
    base = version.split("+", 1)[0]  # torch 2.13.0+cpu and 2.13.0+cu121 are both 2.13.0
    low, high, why = SUPPORTED[dist]
    if not low <= _major_minor(base) < high:
        return f"{dist} {_span(low, high)} is required: {why}"
    if pins and dist in pins and base != pins[dist]:
        return f"{pins.file} pins {dist}=={pins[dist]}"
    return None


def _major_minor(version: str) -> tuple[int, int]:
    major, minor = ([int(p) for p in re.findall(r"\d+", version)[:2]] + [0, 0])[:2]
    return major, minor


def _span(low: tuple[int, int], high: tuple[int, int]) -> str:
    """The supported span in words: (4, 0) to (4, 4) is "4.0 to 4.3", (1, 26) to (3, 0) is "1.26 to 2.x"."""
    last = f"{high[0]}.{high[1] - 1}" if high[1] else f"{high[0] - 1}.x"
    return f"{low[0]}.{low[1]} to {last}"


def _pip_fix(dist: str, pins: Optional[Pins]) -> str:
    if pins and dist in pins:
        return f"install the pinned version: `pip install -c {pins.file} {dist}=={pins[dist]}`"
    low, high, _ = SUPPORTED[dist]
    return f"install a supported version: `pip install '{dist}>={low[0]}.{low[1]},<{high[0]}.{high[1]}'`"


def check_python(version_info: tuple[int, ...] = tuple(sys.version_info[:3])) -> CheckResult:
    version = ".".join(map(str, version_info[:3]))
    if not (3, 11) <= tuple(version_info[:2]) < (3, 14):
        return CheckResult(
            "Python",
            False,
            f"{version}; Python 3.11 to 3.13 is required (the tested stacks run 3.11, 3.12 and 3.13)",
            "create the environment with one of them: `make clean setup PYTHON=python3.12`",
        )
    return CheckResult("Python", True, f"{version} ({sys.executable})")


def parse_java_major(version_output: str) -> Optional[int]:
    """The major version in `java -version` output: 'version "17.0.15"' is 17, 'version "1.8.0_392"' is 8."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 and match.group(2) else major


def check_java(environ: Mapping[str, str] = os.environ) -> CheckResult:
    """The java Spark will start: $JAVA_HOME/bin/java when JAVA_HOME is set (as spark-class does), else PATH."""
    java_home = environ.get("JAVA_HOME")
    if java_home:
        java = os.path.join(java_home, "bin", "java")
        if not os.access(java, os.X_OK):
            return CheckResult(
                "Java",
                False,
                f"JAVA_HOME={java_home} has no bin/java",
                "point JAVA_HOME at a Java 17 installation, or unset it to use java from PATH",
            )
    else:
        java = shutil.which("java", path=environ.get("PATH"))
        if java is None:
            return CheckResult(
                "Java",
                False,
                "java not found on PATH",
                "install Java 17 (e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME",
            )
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return CheckResult("Java", False, f"`{java} -version` failed: {exc}", "reinstall Java 17 or fix JAVA_HOME")
    output = proc.stderr + proc.stdout  # java prints its version on stderr
    major = parse_java_major(output)
    if proc.returncode != 0 or major is None:
        last = output.strip().splitlines()[-1] if output.strip() else "no output"
        return CheckResult(
            "Java", False, f"`{java} -version` exited {proc.returncode}: {last}", "reinstall Java 17 or fix JAVA_HOME"
        )
    version = re.search(r'version "([^"]+)"', output).group(1)
    if major < 17:
        return CheckResult(
            "Java",
            False,
            f"{version} ({java}); Spark 4 needs Java 17 or newer",
            "install Java 17 and set JAVA_HOME to it",
        )
    return CheckResult("Java", True, f"{version} ({java})")


def _import(module: str):
    """The module, or the one-line reason it does not import (a broken install can raise anything)."""
    try:
        return importlib.import_module(module), None
    except Exception as exc:  # noqa: BLE001 - the doctor reports every failure instead of crashing
        return None, f"{module} does not import: {type(exc).__name__}: {exc}"


def check_package(name: str, dist: str, pins: Optional[Pins]) -> CheckResult:
    module, error = _import(dist)
    if error:
        fix = PETASTORM_FIX if "pyarrow.filesystem" in error else _pip_fix(dist, pins)
        return CheckResult(name, False, error, fix)
    version = module.__version__
    label = version if name.lower() == dist else f"{dist} {version}"
    problem = version_problem(dist, version, pins)
    if problem:
        return CheckResult(name, False, f"{label}; {problem}", _pip_fix(dist, pins))
    return CheckResult(name, True, label)


def check_torch(pins: Optional[Pins]) -> CheckResult:
    torch, error = _import("torch")
    if error:
        return CheckResult("torch", False, error, _pip_fix("torch", pins))
    if torch.version.cuda is None:
        devices = "CPU build"
    elif torch.cuda.is_available():
        devices = f"CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s) visible"
    else:
        devices = f"CUDA {torch.version.cuda} build, no GPU visible"
    detail = f"{torch.__version__}, {devices}"
    problem = version_problem("torch", torch.__version__, pins)
    if problem:
        return CheckResult("torch", False, f"{detail}; {problem}", _pip_fix("torch", pins))
    return CheckResult("torch", True, detail)


def check_horovod(pins: Optional[Pins]) -> CheckResult:
    horovod, error = _import("horovod")
    if error:
        return CheckResult("Horovod", False, error, HOROVOD_FIX)
    version, _, label = horovod.__version__.partition("+")
    problem = version_problem("horovod", version, pins)
    if problem:
        return CheckResult("Horovod", False, f"{version}; {problem}", HOROVOD_FIX)
    import torch

    # scripts/build_horovod.sh labels the wheel with the torch it was built against: 0.28.1+torch2.3.1.cu121.
    built_for = label[len("torch") :] if label.startswith("torch") else None
    if built_for is not None and built_for != torch.__version__.replace("+", "."):
        return CheckResult(
            "Horovod",
            False,
            f"{version} built against torch {built_for}, but this environment imports torch {torch.__version__}",
            "rebuild it against this torch: scripts/build_horovod.sh PYTHON (make setup runs it); on a cluster, "
            "install the wheel built for the cluster's torch",
        )
    version += f" (built against torch {built_for})" if built_for else " (built against an unrecorded torch)"
    hvd, error = _import("horovod.torch")
    if error:
        return CheckResult("Horovod", False, f"{version} without PyTorch support: {error}", HOROVOD_FIX)
    gloo, nccl, mpi = bool(hvd.gloo_built()), bool(hvd.nccl_built()), bool(hvd.mpi_built())
    detail = (
        f"{version}, PyTorch yes, Gloo {'yes' if gloo else 'no'}, NCCL {'yes' if nccl else 'no'}, "
        f"MPI {'yes' if mpi else 'no'}"
    )
    if not gloo:
        return CheckResult("Horovod", False, f"{detail}; the Spark launcher needs Gloo", HOROVOD_FIX)
    if torch.cuda.is_available() and not nccl:
        return CheckResult(
            "Horovod",
            False,
            f"{detail}; GPUs are visible but Horovod has no NCCL",
            "`pip uninstall horovod`, delete its wheel under ~/.cache/sparkml_par/wheels and run "
            "scripts/build_horovod.sh on this machine: it builds with NCCL when torch sees a GPU",
        )
    return CheckResult("Horovod", True, detail)


def check_mlflow(pins: Optional[Pins], environ: Mapping[str, str] = os.environ) -> CheckResult:
    """MLflow is optional (tracking.tracking_uri needs it); with MLFLOW_TRACKING_URI set, its server must answer."""
    mlflow, error = _import("mlflow")
    if error and _installed("mlflow") is None:
        return CheckResult(
            "MLflow", True, "not installed (optional: `pip install .[mlflow]` for tracking.tracking_uri)"
        )
    if error:
        return CheckResult("MLflow", False, error, _pip_fix("mlflow", pins))
    detail = mlflow.__version__
    problem = version_problem("mlflow", detail, pins)
    if problem:
        return CheckResult("MLflow", False, f"{detail}; {problem}", _pip_fix("mlflow", pins))
    uri = environ.get("MLFLOW_TRACKING_URI", "")
    if uri.startswith(("http://", "https://")):
        import urllib.request

        try:
            with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=5):
                pass
        except OSError as exc:
            return CheckResult(
                "MLflow",
                False,
                f"{detail}; the tracking server MLFLOW_TRACKING_URI={uri} does not answer ({exc})",
                "start the server or correct MLFLOW_TRACKING_URI (runs with tracking.required=false go on untracked)",
            )
        detail += f", server {uri} answers"
    return CheckResult("MLflow", True, detail)


def check_class_archive() -> CheckResult:
    """The driver JVM's class-data archive is optional: without it a fresh session starts later, loading and
    verifying Spark's classes from its jars."""
    from sparkml_par.spark_runtime import class_archive

    try:
        archive = class_archive.usable_archive()
    except (ImportError, OSError, SystemExit) as exc:  # pyspark's find_spark_home exits when it finds none
        return CheckResult("class-archive", True, f"not checked: Spark's installation is not found ({exc!r})")
    if archive is None:
        return CheckResult(
            "class-archive",
            True,
            "none for this JDK and Spark (optional: `python -m sparkml_par.spark_runtime.class_archive`, which "
            "make setup runs, writes it once; fresh sessions then start sooner)",
        )
    return CheckResult("class-archive", True, f"the driver JVM maps Spark's classes from {archive}")


def run_checks(pins: Optional[Pins]) -> list[CheckResult]:
    return [
        check_python(),
        check_java(),
        check_package("Spark", "pyspark", pins),
        check_torch(pins),
        check_horovod(pins),
        check_package("petastorm", "petastorm", pins),
        check_package("pyarrow", "pyarrow", pins),
        check_package("numpy", "numpy", pins),
        check_mlflow(pins),
        check_class_archive(),
    ]


def report(stream: Optional[TextIO] = None) -> int:
    """Prints one line per component and a fix under each problem; 0 when the stack can run, else 1."""
    stream = sys.stdout if stream is None else stream
    constraints = find_constraints()
    pins = read_pins(constraints) if constraints else None
    results = run_checks(pins)
    width = max(len(r.name) for r in results)
    for r in results:
        print(f"{'ok' if r.ok else 'FAIL':<5} {r.name:<{width}}  {r.detail}", file=stream)
        if r.fix:
            print(f"      fix: {r.fix}", file=stream)
    basis = (
        f"the pins of the {stack_name(constraints)} stack in {constraints}"
        if constraints
        else "the versions the tested stacks cover (no constraints file)"
    )
    problems = sum(not r.ok for r in results)
    verdict = "the stack can run" if not problems else f"{problems} problem(s): the stack cannot run"
    print(f"compared with {basis}; {verdict}", file=stream)
    return 1 if problems else 0
