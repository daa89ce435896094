"""The launcher's only contact with Horovod: the Gloo rendezvous server and process-set start-up.

Horovod's own `RendezvousServer.start()` binds every interface; here the same HTTP rendezvous
server is bound to the rank-0 task's address only, on a port the kernel picks, and stopped when rank 0's
function returns (Horovod goes back to it for `hvd.init()` after `hvd.shutdown()` and for process sets).
"""

from __future__ import annotations

import ipaddress
import socket
import threading

import psutil

from sparkml_par.errors import SparkmlParError
from sparkml_par.launch.rank_plan import RankSlot


class Rendezvous:
    """Horovod's Gloo rendezvous (an HTTP key-value store) for one launch."""

    def __init__(self, bind_ip: str, plan: list[RankSlot]):
        from horovod.runner.common.util.hosts import SlotInfo
        from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

        self._httpd = RendezvousHTTPServer((bind_ip, 0), RendezvousHandler, 0)
        self._httpd.init(
            [
                SlotInfo(
                    hostname=s.host,
                    rank=s.rank,
                    local_rank=s.local_rank,
                    cross_rank=s.cross_rank,
                    size=s.size,
                    local_size=s.local_size,
                    cross_size=s.cross_size,
                )
                for s in plan
            ]
        )
        self.address = self._httpd.server_address[:2]
        # shutdown() waits for the serve loop's next poll: the default interval (0.5 s) would delay every launch.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="horovod-rendezvous", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join()
            self._thread = None


def resolve_ip(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return socket.gethostbyname(host)


def interface_for(ip: str) -> str:
    """The network interface that holds `ip`: Gloo must use the interface Spark reaches the task on."""
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == ip for a in addresses):
            return name
    held = sorted(
        f"{name} {a.address}"
        for name, addresses in psutil.net_if_addrs().items()
        for a in addresses
        if a.family == socket.AF_INET
    )
    raise SparkmlParError(
        f"no network interface on {socket.gethostname()} holds the task address {ip} that Spark gave the other "
        f"ranks (this host has {', '.join(held)}); Gloo could not reach this rank. Set SPARK_LOCAL_IP on this "
        f"host's worker to one of its own addresses that the other hosts reach"
    )


def gloo_env(slot: RankSlot, rendezvous: tuple[str, int], iface: str, timeout: float) -> dict[str, str]:
    return {
        **slot.horovod_env(),
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": rendezvous[0],
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(rendezvous[1]),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_IFACE": iface,
        "HOROVOD_GLOO_TIMEOUT_SECONDS": str(int(max(timeout, 1))),
    }


def init_horovod(slot: RankSlot) -> None:
    """Start Horovod from the environment, check it took the planned rank, and wait for every rank."""
    import horovod.torch as hvd
    import torch

    hvd.init()
    got = (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size())
    want = (slot.rank, slot.size, slot.local_rank, slot.local_size, slot.cross_rank, slot.cross_size)
    if got != want:
        raise SparkmlParError(
            f"Horovod started as (rank, size, local_rank, local_size, cross_rank, cross_size)"
            f"={got}, but the launch planned {want}; check HOROVOD_* variables in env="
        )
    # Once this returns, every rank has joined the collective.
    hvd.allreduce(torch.zeros(1), name="sparkml_par.joined")


def shutdown_horovod() -> None:
    import horovod.torch as hvd

    hvd.shutdown()
