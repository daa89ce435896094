"""The GPU check: Horovod with NCCL on every GPU of one machine, with no Spark (Spark need not run there).

    python scripts/gpu_check.py               # on a machine with 1-8 GPUs: builds .venv-cuda if needed
    python scripts/gpu_check.py --cpu         # the self-test: the same checks on 2 CPU ranks over Gloo

One rank per GPU (the project's launcher, local processes), each on its own device. It checks exact results
of all-reduce (float32 and int64), allgather and broadcast; trains an MLP with the project's distributed
optimizer for --steps steps in fp32, fp32 with fp16 gradient compression, bf16 autocast and fp16 autocast
with a gradient scaler (the loss must fall and every rank must end with the same weights); writes a
checkpoint with the project's writer and reads it back; and times the same fp32 steps under PyTorch DDP on
the same devices. It prints each check, the step times and what it could not check; the exit code is 1
when a check failed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FEATURES, CLASSES, BATCH = 64, 10, 256


def _model():
    from torch import nn

    return nn.Sequential(nn.Linear(FEATURES, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, CLASSES))


def _batches(rank: int, steps: int, device):
    """Per-rank batches of a learnable problem: labels from a fixed random projection of the features."""
    import torch

    projection = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(1))
    generator = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        x = torch.randn(BATCH, FEATURES, generator=generator)
        yield x.to(device), (x @ projection).argmax(1).to(device)


def _timed_steps(step, batches, device) -> tuple[list[float], list[float]]:
    """Runs step(x, y) -> loss over the batches; the losses and each step's milliseconds."""
    import torch

    losses, millis = [], []
    for x, y in batches:
        start = time.perf_counter()
        loss = step(x, y)
        if device.type == "cuda":
            torch.cuda.synchronize()
        millis.append(1000 * (time.perf_counter() - start))
        losses.append(float(loss))
    return losses, millis


def _collectives(hvd, torch, device) -> bool:
    rank, size = hvd.rank(), hvd.size()
    values = torch.arange(4096, dtype=torch.float32, device=device) + rank
    summed = hvd.allreduce(values, op=hvd.Sum, name="check.sum")
    want = torch.arange(4096, dtype=torch.float32, device=device) * size + size * (size - 1) / 2
    counts = hvd.allreduce(torch.full((7,), rank + 1, dtype=torch.int64, device=device), op=hvd.Sum, name="check.int")
    gathered = hvd.allgather(torch.full((rank + 1, 3), float(rank), device=device), name="check.gather")
    rows = torch.cat([torch.full((r + 1, 3), float(r), device=device) for r in range(size)])
    sent = hvd.broadcast(torch.full((5,), float(rank), device=device), root_rank=size - 1, name="check.bcast")
    return bool(
        torch.equal(summed, want)
        and torch.equal(counts, torch.full_like(counts, size * (size + 1) // 2))
        and torch.equal(gathered, rows)
        and torch.equal(sent, torch.full_like(sent, float(size - 1)))
    )


def _train(hvd, torch, device, steps: int, precision: str, compression: bool) -> dict:
    from sparkml_par.train.distributed import broadcast_training_state, distributed_optimizer

    torch.manual_seed(0)
    model = _model().to(device)
    optimizer = distributed_optimizer(
        torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), model, compression, backward_passes_per_step=1
    )
    broadcast_training_state(model, optimizer)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None

    def step(x, y):
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            optimizer.synchronize()
            scaler.unscale_(optimizer)
            with optimizer.skip_synchronize():
                scaler.step(optimizer)
            scaler.update()
        return loss.detach()

    losses, millis = _timed_steps(step, _batches(hvd.rank(), steps, device), device)
    weights = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    everyone = hvd.allgather(weights.unsqueeze(0), name=f"check.weights.{precision}.{compression}")
    fell = statistics.mean(losses[-10:]) < 0.8 * statistics.mean(losses[:10])
    return {"ok": fell and bool((everyone == everyone[0]).all()), "ms": statistics.median(millis[5:])}


def _checkpoint(hvd, torch, device, workdir: str) -> bool:
    from sparkml_par.train.checkpoint import load_latest_checkpoint, write_checkpoint_atomically

    torch.manual_seed(hvd.rank())
    model = _model().to(device)
    fingerprint = {"check": "gpu"}
    if hvd.rank() == 0:
        weights = {name: value.cpu() for name, value in model.state_dict().items()}
        write_checkpoint_atomically(workdir, 1, {"fingerprint": fingerprint, "model": weights}, keep=1)
    hvd.barrier()
    state = load_latest_checkpoint(workdir, fingerprint)
    restored = _model().to(device)
    restored.load_state_dict(state["model"])
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    return all(
        torch.equal(a, b.to(device)) for a, b in zip(model.state_dict().values(), restored.state_dict().values())
    )


def _ddp(hvd, torch, device, steps: int) -> float:
    """Median fp32 step milliseconds of the same model under DDP on the same devices."""
    import gc

    import torch.distributed as dist

    from sparkml_par.train.distributed import broadcast_object

    port = broadcast_object(_free_port() if hvd.rank() == 0 else None, "check.port")
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=hvd.rank(),
        world_size=hvd.size(),
    )
    try:
        millis = _ddp_steps(torch, device, hvd.rank(), steps)
        gc.collect()  # the DDP model before its process group: a Gloo group destroyed first hung the model's end
        return statistics.median(millis[5:])
    finally:
        dist.destroy_process_group()


def _ddp_steps(torch, device, rank: int, steps: int) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        _model().to(device), device_ids=[device.index] if device.type == "cuda" else None
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(x, y):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return _timed_steps(step, _batches(rank, steps, device), device)[1]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_rank(steps: int, workdir: str) -> dict:
    """What each rank runs: every check on its own device."""
    import horovod.torch as hvd
    import torch

    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
        device = torch.device("cuda", hvd.local_rank())
    else:
        # One thread per CPU rank, as the trainer's default (train.threads_per_rank): with torch's default of
        # a thread per core, 2 ranks on 2 cores took 130 ms a step with Horovod's grouped all-reduce, not 3.
        torch.set_num_threads(1)
        device = torch.device("cpu")
    precisions = ["fp32", "bf16", "fp16"] if device.type == "cuda" else ["fp32", "bf16"]
    checks = {"all-reduce (float32, int64), allgather, broadcast: exact": _collectives(hvd, torch, device)}
    _train(hvd, torch, device, 20, "fp32", False)  # warm-up: first CUDA or Gloo use, Horovod's response cache
    millis = {}
    for precision, compression in [("fp32", False), ("fp32", True)] + [(p, False) for p in precisions[1:]]:
        name = precision + (" + fp16 gradient compression" if compression else "")
        trained = _train(hvd, torch, device, steps, precision, compression)
        checks[f"{name}: the loss falls, every rank ends with the same weights"] = trained["ok"]
        millis[f"Horovod {name}"] = trained["ms"]
    checks["checkpoint written and read back equal"] = _checkpoint(hvd, torch, device, workdir)
    millis["DDP fp32"] = _ddp(hvd, torch, device, steps)
    return {"device": str(device), "checks": checks, "ms": millis}


def _environment() -> tuple[int, bool]:
    import torch

    try:
        import horovod.torch as hvd

        nccl = bool(hvd.nccl_built())
    except ImportError:
        nccl = False
    return (torch.cuda.device_count() if torch.cuda.is_available() else 0), nccl


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="the self-test: 2 CPU ranks over Gloo")
    parser.add_argument("--steps", type=int, default=300, help="training steps per precision (default 300)")
    args = parser.parse_args(argv)
    gpus, nccl = _environment()
    if not args.cpu and gpus and not nccl:
        cuda_python = REPO / ".venv-cuda" / "bin" / "python"
        if Path(sys.executable) != cuda_python:
            print("Horovod here has no NCCL: building the cuda stack (make setup STACK=cuda)", flush=True)
            subprocess.run(["make", "-C", str(REPO), "setup", "STACK=cuda"], check=True)
            os.execv(str(cuda_python), [str(cuda_python), __file__, *sys.argv[1:]])
    if not args.cpu and not gpus:
        print("no GPU visible to torch: nothing to check (run with --cpu for the self-test)")
        return 1
    import horovod
    import torch

    from sparkml_par.launch import Launcher

    ranks = 2 if args.cpu else min(gpus, 8)
    where = "CPU (Gloo)" if args.cpu else f"{ranks} x {torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"
    print(
        f"GPU check: {ranks} ranks on {where}; torch {torch.__version__}, Horovod {horovod.__version__}, "
        f"NCCL {'yes' if nccl else 'no'}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="sparkml_par-gpu-check-") as workdir:
        results = Launcher(num_proc=ranks, mode="local").run(check_rank, args.steps, workdir)
    failed = [name for name in results[0]["checks"] if not all(r["checks"][name] for r in results)]
    for name in results[0]["checks"]:
        print(f"  {'FAILED' if name in failed else 'ok':<7} {name}")
    print(f"  step milliseconds (median over ranks of each rank's median, {args.steps} steps, batch {BATCH}/rank):")
    for name in results[0]["ms"]:
        print(f"    {name:<48} {statistics.median(r['ms'][name] for r in results):8.3f}")
    unchecked = ["ranks on more than one host (this runs on one machine)"]
    if args.cpu:
        unchecked = ["NCCL (CPU ranks use Gloo)", "fp16 with its gradient scaler (CUDA only)"] + unchecked
    print("  not checked: " + "; ".join(unchecked))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
