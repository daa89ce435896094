"""A Spark standalone cluster of simulated hosts: Linux network namespaces joined by a bridge.

The master runs in the root namespace on the bridge's address; each host is a namespace with a veth pair
into the bridge, its own private test address and one 1-core worker bound to it. The filesystem is
shared by all namespaces (it stands in for NFS), and the machine's hostname resolves to 127.0.0.1 in
every one of them, as on many real hosts. Traffic goes only between the addresses made here. Every
process is started in its own process group and stopped by its pid; namespaces, links and the bridge are
removed in `stop()`, also after a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

# A private range no real network of this machine uses; the test makes and removes every address in it.
SUBNET = "10.213.37"
BRIDGE_ADDRESS = f"{SUBNET}.1"


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "simulated hosts need root (network namespaces, veth pairs, a bridge)"
    if shutil.which("ip") is None:
        return "simulated hosts need iproute2 (the ip command)"
    probe = f"spmp-probe-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


def _ip(*args: str, namespace: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    command = (["ip", "netns", "exec", namespace, "ip"] if namespace else ["ip"]) + list(args)
    done = subprocess.run(command, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return done


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((BRIDGE_ADDRESS, 0))
        return s.getsockname()[1]


@dataclass
class Host:
    name: str  # the namespace
    address: str
    worker: subprocess.Popen | None = None
    log: Path | None = None


@dataclass
class SimulatedCluster:
    root: Path
    hosts: int = 2
    workers: int | None = None  # hosts whose worker starts with the cluster (default: all); start_worker starts more
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:4])
    master: subprocess.Popen | None = None
    master_url: str = ""
    members: list[Host] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"br-spmp{self.tag}"

    def start(self) -> "SimulatedCluster":
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i in range(1, self.hosts + 1):
            host = Host(name=f"spmp{self.tag}-h{i}", address=f"{SUBNET}.{10 + i}")
            outside, inside = f"vspmp{self.tag}{i}", f"vspmp{self.tag}{i}p"
            _ip("netns", "add", host.name)
            self.members.append(host)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", outside, "master", self.bridge)
            _ip("link", "set", outside, "up")
            _ip("link", "set", inside, "netns", host.name)
            _ip("addr", "add", f"{host.address}/24", "dev", inside, namespace=host.name)
            _ip("link", "set", inside, "up", namespace=host.name)
            _ip("link", "set", "lo", "up", namespace=host.name)
        port = _free_port()
        self.master_url = f"spark://{BRIDGE_ADDRESS}:{port}"
        self.master = self._spawn(
            None,
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                BRIDGE_ADDRESS,
                "--port",
                str(port),
                "--webui-port",
                str(_free_port()),
            ],
        )
        started = self.members[: self.hosts if self.workers is None else self.workers]
        for host in started:
            self.start_worker(host)
        self.wait_for_workers(len(started))
        return self

    def start_worker(self, host: Host) -> None:
        host.log = self.root / f"worker-{host.name}.log"
        host.worker = self._spawn(
            host,
            f"worker-{host.name}",
            [
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                host.address,
                "--cores",
                "1",
                "--memory",
                "2g",
                "--webui-port",
                "0",
                "--work-dir",
                str(self.root / f"work-{host.name}"),
                self.master_url,
            ],
        )

    def stop_worker(self, host: Host) -> None:
        """Kills the worker and its executors, as when the host is lost."""
        if host.worker is not None:
            _kill_group(host.worker)
            host.worker = None

    def wait_for_workers(self, count: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._registered_workers() >= count:
                return
            time.sleep(0.5)
        raise RuntimeError(
            f"{count} workers did not register with {self.master_url} within {timeout:g} s; see {self.root}"
        )

    def _registered_workers(self) -> int:
        log = (self.root / "master.log").read_text(errors="replace") if (self.root / "master.log").exists() else ""
        return log.count("Registering worker") - log.count("Removing worker")

    def driver_settings(self) -> list[str]:
        """Config overrides that point a pipeline's driver at this cluster."""
        return [
            f"spark.master={self.master_url}",
            f"spark.conf.spark.driver.host={BRIDGE_ADDRESS}",
            f"spark.conf.spark.driver.bindAddress={BRIDGE_ADDRESS}",
            "spark.conf.spark.executor.cores=1",
            "spark.conf.spark.executor.memory=1g",
            "spark.conf.spark.ui.enabled=false",
            f"spark.conf.spark.pyspark.python={sys.executable}",
            f"spark.conf.spark.executorEnv.PYTHONPATH={Path(__file__).parent}",
        ]

    def _spawn(self, host: Host | None, name: str, arguments: list[str]) -> subprocess.Popen:
        import pyspark

        spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
        env = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": host.address if host else BRIDGE_ADDRESS,
            "SPARK_WORKER_DIR": str(self.root / f"work-{name}"),
            "SPARK_LOG_DIR": str(self.root),
        }
        command = [str(spark_class), *arguments]
        if host is not None:
            command = ["ip", "netns", "exec", host.name, "env", f"SPARK_LOCAL_IP={host.address}", *command]
        log = open(self.root / f"{name}.log", "w")
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def stop(self) -> None:
        for host in self.members:
            self.stop_worker(host)
        if self.master is not None:
            _kill_group(self.master)
            self.master = None
        for host in self.members:
            _ip("netns", "delete", host.name, check=False)
        _ip("link", "delete", self.bridge, check=False)
        self.members = []


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=30)
