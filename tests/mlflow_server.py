"""A real MLflow tracking server on loopback for the tracking tests, started on first use in its own process:
`mlflow server` with a sqlite backend store and a file artifact root in a temporary directory."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MlflowServer:
    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="sparkml_par-mlflow-"))
        self.port = _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        command = [
            str(Path(sys.executable).with_name("mlflow")),
            "server",
            "--backend-store-uri",
            f"sqlite:///{self.root / 'mlflow.db'}",
            "--default-artifact-root",
            f"file://{self.root / 'artifacts'}",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
        ]
        self._log = open(self.root / "server.log", "wb")
        # Its own process group: `mlflow server` runs the server in a child (gunicorn on older MLflow), which
        # terminating the CLI process alone leaves running.
        self._process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if self._process.poll() is not None or time.monotonic() > deadline:
                self._log.flush()
                log = (self.root / "server.log").read_text(errors="replace")[-3000:]
                self.stop()
                raise RuntimeError(f"mlflow server did not start:\n{log}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
        with contextlib.suppress(ProcessLookupError):  # children the CLI left behind when it exited
            os.killpg(self._process.pid, signal.SIGKILL)
        self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)
