"""Which CUDA device a Spark GPU address is, inside the process that Spark gave it to.

Spark assigns each task GPU addresses from the executor's discovery script: nvidia-smi's indices on
the host, unless the cluster manager started the executor with CUDA_VISIBLE_DEVICES already set
(YARN and Kubernetes device plugins do), when the script's addresses are those of that list. A rank
keeps every GPU the executor sees visible and selects its own with `torch.cuda.set_device`: NCCL
moves data between GPUs of one host through CUDA IPC, which a process cannot open to a GPU it does
not see, so masking each rank to its GPU with CUDA_VISIBLE_DEVICES turns peer-to-peer transfers into
copies through host memory (NVIDIA/nccl#129, Horovod's troubleshooting guide).
"""

from __future__ import annotations

import os

from sparkml_par.errors import SparkmlParError


def device_index(address: str, visible: str | None) -> int:
    """The CUDA device index of GPU `address` in a process whose CUDA_VISIBLE_DEVICES is `visible`."""
    if visible is None or not visible.strip():
        if not address.strip().isdigit():
            raise SparkmlParError(
                f"Spark assigned GPU address {address!r}, which is not a device index, and CUDA_VISIBLE_DEVICES "
                f"is not set to map it; make the GPU discovery script print nvidia-smi's indices"
            )
        return int(address)
    listed = [entry.strip() for entry in visible.split(",")]
    if address.strip() in listed:
        return listed.index(address.strip())
    raise SparkmlParError(
        f"Spark assigned GPU address {address!r}, which is not one of this executor's "
        f"CUDA_VISIBLE_DEVICES={visible!r}; make the GPU discovery script print the addresses of the GPUs "
        f"the executor sees (spark.executor.resource.gpu.discoveryScript)"
    )


def device_indices(addresses: tuple[str, ...]) -> tuple[int, ...]:
    """The CUDA device indices of this process's GPU addresses, in the order Spark assigned them."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return tuple(device_index(address, visible) for address in addresses)


def address_order(addresses: tuple[str, ...]) -> tuple[int, int, str]:
    """A key that orders tasks of one host by their first GPU, numerically where the addresses are numbers."""
    first = addresses[0] if addresses else ""
    return (0, int(first), "") if first.isdigit() else (1, 0, first)
