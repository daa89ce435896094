"""The GPU check's self-test: its checks on two CPU ranks over Gloo (scripts/gpu_check.py --cpu)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "scripts" / "gpu_check.py"


def test_the_gpu_check_passes_on_cpu_ranks_and_says_what_it_did_not_check():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu", "--steps", "40"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("GPU check: 2 ranks on CPU (Gloo)")
    checks = [line.split(None, 1) for line in lines if line.startswith("  ok") or line.startswith("  FAILED")]
    assert [status for status, _ in checks] == ["ok"] * 5
    assert any("fp16 gradient compression" in name for _, name in checks)
    timed = [line.split()[-1] for line in lines if line.startswith("    Horovod") or line.startswith("    DDP")]
    assert len(timed) == 4 and all(float(ms) > 0 for ms in timed)
    assert "not checked: NCCL (CPU ranks use Gloo)" in done.stdout
