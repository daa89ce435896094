"""What every rank runs around the user's function, whichever launcher started it.

The rank sets its Horovod environment, selects its GPU, forwards its output to the driver, joins the
Gloo rendezvous, runs the function, and always shuts Horovod down and restores the process's
environment afterwards: Spark reuses Python workers between stages.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from sparkml_par.launch import gpus, horovod_backend
from sparkml_par.launch.channel import ForwardingStream, RankChannel
from sparkml_par.launch.native_stderr import NativeStderr
from sparkml_par.launch.rank_plan import RankSlot

FAILURE_MARKER = "SPARKML_PAR_RANK_FAILURE"


@dataclass(frozen=True)
class RankSpec:
    """Plain values a rank needs; captured by the barrier closure, so no live handles in here."""

    fn: Callable[..., Any]
    args: tuple
    kwargs: dict
    env: dict[str, str]
    channel_address: tuple[str, int] | None
    token: str
    timeout: float
    use_gpu: bool
    setup: Callable[[RankSlot], None] | None = None  # see Launcher.setup


class RankFailure(RuntimeError):
    """Raised in a rank; its text carries a marker the driver finds in Spark's error."""

    def __init__(self, rank: int, host: str, error: str, remote_traceback: str):
        self.rank, self.host, self.error, self.remote_traceback = rank, host, error, remote_traceback
        payload = json.dumps({"rank": rank, "host": host, "error": error, "traceback": remote_traceback})
        super().__init__(f"{FAILURE_MARKER}{payload}{FAILURE_MARKER}")


@dataclass
class RankContext:
    """Handed to code running inside a rank (through `current_rank()`) to report progress."""

    slot: RankSlot
    channel: RankChannel
    gpu_addresses: tuple[str, ...]
    gpu_devices: tuple[int, ...] = ()  # the CUDA device index of each address, in this process

    last_heartbeat: float = 0.0

    def report(self, record: dict) -> None:
        """Send a progress record (e.g. one epoch's metrics) to the driver as it happens."""
        self.channel.send("progress", record=record)

    def cluster_slots(self) -> int | None:
        """The cluster's task slots now (asked of the driver; None under the local launcher)."""
        return self.channel.cluster_slots()

    def heartbeat(self) -> None:
        """Tell the driver this rank still makes progress (call it every step; sends at most once a second)."""
        now = time.monotonic()
        if now - self.last_heartbeat >= 1.0:
            self.last_heartbeat = now
            self.channel.send("heartbeat")


_current: RankContext | None = None


def current_rank() -> RankContext | None:
    return _current


def run_rank(
    spec: RankSpec, plan: list[RankSlot], task: int, own_ip: str, gpu_addresses: tuple[str, ...] = (), task_id: int = 0
) -> Any:
    """Runs spec.fn as the rank that `plan` gives task number `task`; rank 0 hosts the rendezvous.

    The rendezvous stays up until rank 0's function returns, so Horovod's own API works inside it
    (`hvd.shutdown()` and `hvd.init()` again, `hvd.add_process_set`). task_id is Spark's task attempt id:
    it tells the driver which stage attempt this rank belongs to."""
    global _current
    slot = plan[task]
    channel = RankChannel(spec.channel_address, spec.token, slot.rank)
    if not channel.start(spec.timeout, host=slot.host, task=slot.task, pid=os.getpid(), task_id=task_id):
        channel.close()
        raise RuntimeError(f"rank {slot.rank}: the driver ended the launch before this stage attempt could run")
    native_stderr = NativeStderr(spec.channel_address, spec.token, slot.rank, task_id)
    saved_env = dict(os.environ)
    saved_streams = sys.stdout, sys.stderr
    initialized = False
    rendezvous = None
    try:
        # Gloo connects over this interface: it must hold the address the other ranks know this task by.
        iface = horovod_backend.interface_for(own_ip)
        if slot.rank == 0:
            rendezvous = horovod_backend.Rendezvous(own_ip, plan)
            channel.send("rendezvous", address=rendezvous.address)
            rendezvous_address = rendezvous.address
        else:
            rendezvous_address = channel.await_rendezvous(spec.timeout)
        os.environ.update(horovod_backend.gloo_env(slot, rendezvous_address, iface, spec.timeout))
        os.environ.update(spec.env)
        devices = _bind_gpu(gpu_addresses) if spec.use_gpu else ()
        sys.stdout = ForwardingStream(channel, saved_streams[0])
        sys.stderr = ForwardingStream(channel, saved_streams[1])
        if spec.setup is not None:
            spec.setup(slot)
        channel.send("joining")
        horovod_backend.init_horovod(slot)
        initialized = True
        channel.send("initialized")
        _current = RankContext(slot, channel, tuple(gpu_addresses), devices)
        result = spec.fn(*spec.args, **spec.kwargs)
        channel.send("finished")
        return result
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        remote_traceback = traceback.format_exc()
        channel.send("failed", host=slot.host, error=error, traceback=remote_traceback)
        raise RankFailure(slot.rank, slot.host, error, remote_traceback) from None
    finally:
        _current = None
        if initialized:
            horovod_backend.shutdown_horovod()
        if rendezvous is not None:
            rendezvous.stop()
        sys.stdout, sys.stderr = saved_streams
        os.environ.clear()
        os.environ.update(saved_env)
        native_stderr.restore()
        channel.close()


def _bind_gpu(addresses: tuple[str, ...]) -> tuple[int, ...]:
    """Selects the task's first GPU as this process's CUDA device, every GPU staying visible (launch/gpus.py);
    returns the device index of each of the task's GPUs."""
    if not addresses:
        raise RuntimeError(
            "use_gpu is on but Spark assigned this task no GPU "
            "(set spark.task.resource.gpu.amount and the executor's GPU discovery script)"
        )
    devices = gpus.device_indices(addresses)
    import torch

    if torch.cuda.is_available():
        torch.cuda.set_device(devices[0])
    return devices
