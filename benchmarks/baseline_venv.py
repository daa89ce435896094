"""The TorchDistributor baselines: a virtual environment of their own and a baseline script served in it.

TorchDistributor needs pyarrow >= 15 and petastorm needs < 15, so a baseline runs in benchmarks/.venv-baseline
(created once, from the CPU torch wheel on disk) with its own Spark session, as a subprocess that answers
one timed request per line on stdin. A baseline that cannot run is recorded as such; the benchmark goes on.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
BASELINE_VENV = BENCH_DIR / ".venv-baseline"
BASELINE_SCRIPT = BENCH_DIR / "baselines" / "torch_distributor_launch.py"
# pyarrow 26 refuses numpy 1.x; 15-25 work with it.
BASELINE_REQUIREMENTS = ["torch==2.13.0", "pyspark==4.1.4", "pyarrow>=15,<26", "pandas", "numpy<2"]
LOOPBACK = "127.0.0.1"


class BaselineUnavailable(RuntimeError):
    pass


def ensure_baseline_venv(venv: Path = BASELINE_VENV, rebuild: bool = False) -> Path:
    """Creates (once) the baseline's venv; refuses any plan that would download a CUDA build of torch."""
    python = venv / "bin" / "python"
    ready = venv / ".ready"
    if ready.exists() and not rebuild:
        return python
    print(f"creating the TorchDistributor baseline environment in {venv} (once; a few minutes) ...", flush=True)
    _check_call([sys.executable, "-m", "venv", "--clear", str(venv)], "create the baseline venv")
    report = venv / "pip-plan.json"
    _check_call(
        [str(python), "-m", "pip", "install", "--quiet", "--dry-run", "--report", str(report), *BASELINE_REQUIREMENTS],
        "resolve the baseline requirements",
    )
    plan = {item["metadata"]["name"].lower(): item for item in json.loads(report.read_text())["install"]}
    torch_url = plan.get("torch", {}).get("download_info", {}).get("url", "")
    gpu_packages = sorted(name for name in plan if name.startswith(("nvidia-", "cuda-", "triton")))
    if not torch_url.startswith("file:") or gpu_packages:
        raise BaselineUnavailable(
            f"pip would install torch from {torch_url or 'nowhere'} with {gpu_packages or 'no'} GPU packages; "
            f"the baseline needs the CPU torch 2.13.0 wheel on disk (pip's find-links, e.g. /opt/wheels)"
        )
    _check_call(
        [str(python), "-m", "pip", "install", "--quiet", *BASELINE_REQUIREMENTS], "install the baseline requirements"
    )
    _check_call(
        [str(python), "-c", "import pandas, pyarrow, pyspark.ml.torch.distributor, torch"],
        "import the baseline's packages",
    )
    ready.write_text(json.dumps({name: item["metadata"]["version"] for name, item in sorted(plan.items())}, indent=1))
    return python


class TorchDistributorBaseline:
    """The baseline script in --serve mode, in its own venv and JVM: one timed launch per request."""

    def __init__(self, python: Path, num_proc: int, timeout: float = 600, script: Path = BASELINE_SCRIPT):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_", "VIRTUAL_ENV"))}
        env.update(SPARK_LOCAL_IP=LOOPBACK, PYTHONUNBUFFERED="1")
        self.command = [str(python), str(script), "--serve", "--num-proc", str(num_proc)]
        self._timeout = timeout
        self._stderr = tempfile.TemporaryFile("w+")
        self._process = subprocess.Popen(
            self.command,
            env=env,
            cwd=BENCH_DIR,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def wait_ready(self) -> None:
        self._expect("READY")

    def launch(self) -> dict:
        self._send("launch")
        return json.loads(self._expect("LAUNCH "))

    def close(self) -> dict:
        """Ends the script; returns its summary (versions, warm-up, driver peak RSS)."""
        self._send("quit")
        summary = json.loads(self._expect("RESULT "))
        self._process.wait(60)
        return summary

    def kill(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def _read(self) -> None:
        for line in self._process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _send(self, command: str) -> None:
        try:
            self._process.stdin.write(command + "\n")
            self._process.stdin.flush()
        except OSError:
            raise self._failure("stopped accepting commands") from None

    def _expect(self, prefix: str) -> str:
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise self._failure(f"gave no {prefix.strip()} line within {self._timeout:g} s") from None
            if line is None:
                self._process.wait()
                raise self._failure(f"exited with {self._process.returncode} before {prefix.strip()}")
            if line.startswith(prefix):
                return line[len(prefix) :]

    def _failure(self, what: str) -> BaselineUnavailable:
        self._stderr.seek(0)
        # Spark's error is mostly JVM stack frames; the Python traceback inside it is what explains it.
        lines = [line for line in self._stderr.read().splitlines() if not line.startswith("\tat ")]
        tail = "\n".join(lines[-40:])
        return BaselineUnavailable(f"{' '.join(self.command)} {what}:\n{tail}")


def _check_call(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise BaselineUnavailable(f"could not {what}: {' '.join(command)} exited with {done.returncode}:\n{tail}")


def baseline_step(
    baseline: TorchDistributorBaseline | None, record: dict, step, error_key: str = "torch_distributor_error"
):
    """One request to the baseline; on failure the error is recorded and the run goes on without it."""
    if baseline is None or record.get(error_key):
        return None
    try:
        return step(baseline)
    except BaselineUnavailable as exc:
        record[error_key] = str(exc)
        print(f"TorchDistributor baseline failed: {exc}", file=sys.stderr)
        baseline.kill()
        return None
