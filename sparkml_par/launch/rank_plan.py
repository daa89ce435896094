"""The rank plan: which Horovod rank each barrier task becomes.

Every task derives the same plan from the same list of task addresses (ordered by partition id), so
no message is needed to agree on it. Ranks are grouped by host, as Horovod expects: local_rank
counts tasks within a host, cross_rank counts hosts that have a task at that local_rank. With GPUs,
a host's tasks take their local ranks in the order of their GPU addresses, so local rank i holds the
host's i-th GPU (what code written for `torch.cuda.set_device(hvd.local_rank())` assumes).
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkml_par.launch.gpus import address_order


@dataclass(frozen=True)
class RankSlot:
    task: int
    host: str
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int

    def horovod_env(self) -> dict[str, str]:
        return {
            "HOROVOD_HOSTNAME": self.host,
            "HOROVOD_RANK": str(self.rank),
            "HOROVOD_SIZE": str(self.size),
            "HOROVOD_LOCAL_RANK": str(self.local_rank),
            "HOROVOD_LOCAL_SIZE": str(self.local_size),
            "HOROVOD_CROSS_RANK": str(self.cross_rank),
            "HOROVOD_CROSS_SIZE": str(self.cross_size),
        }


def build_rank_plan(task_hosts: list[str], task_gpus: list[tuple[str, ...]] | None = None) -> list[RankSlot]:
    """One slot per task, in task (partition) order; hosts keep the order they first appear in, and a
    host's tasks the order of their GPU addresses (task_gpus, by task) or else of their partitions."""
    hosts: dict[str, list[int]] = {}
    for task, host in enumerate(task_hosts):
        hosts.setdefault(host, []).append(task)
    if task_gpus is not None:
        hosts = {host: sorted(tasks, key=lambda t: address_order(task_gpus[t])) for host, tasks in hosts.items()}
    hosts_at_local_rank: dict[int, list[str]] = {}
    for host, tasks in hosts.items():
        for local_rank in range(len(tasks)):
            hosts_at_local_rank.setdefault(local_rank, []).append(host)

    slots = []
    rank = 0
    for host, tasks in hosts.items():
        for local_rank, task in enumerate(tasks):
            peers = hosts_at_local_rank[local_rank]
            slots.append(
                RankSlot(
                    task=task,
                    host=host,
                    rank=rank,
                    size=len(task_hosts),
                    local_rank=local_rank,
                    local_size=len(tasks),
                    cross_rank=peers.index(host),
                    cross_size=len(peers),
                )
            )
            rank += 1
    return sorted(slots, key=lambda s: s.task)
