"""A rank's native stderr (file descriptor 2), kept for the driver even when the rank's process dies.

Native code (Gloo, NCCL, the C++ runtime's terminate handler) writes to file descriptor 2, not to
sys.stderr, and a process that aborts takes every thread of its own with it. So while a rank runs,
descriptor 2 goes into a pipe read by a small child process: it copies every byte on to the original
stderr (the executor's log) and, once the pipe closes (the rank finished, or died), sends the last lines
to the driver's channel, where a rank that died carries them into the error.

Run as `python -m sparkml_par.launch.native_stderr HOST PORT RANK TASK_ID` with the launch token on
its first input line.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys

TAIL_LINES = 30


class NativeStderr:
    """Descriptor 2 of this process goes through the forwarding child until `restore()`."""

    def __init__(self, address: tuple[str, int] | None, token: str, rank: int, task_id: int):
        self._child = None
        self._saved = None
        if address is None:
            return
        try:
            sys.stderr.flush()
            self._saved = os.dup(2)
            self._child = subprocess.Popen(
                [sys.executable, "-m", __name__, str(address[0]), str(address[1]), str(rank), str(task_id)],
                stdin=subprocess.PIPE,
                stdout=self._saved,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
            self._child.stdin.write(token.encode("ascii") + b"\n")
            self._child.stdin.flush()
            os.dup2(self._child.stdin.fileno(), 2)
        except OSError as exc:  # the rank runs on without it: its stderr stays the executor's
            print(f"[rank {rank}] cannot keep native stderr for the driver: {exc}", file=sys.stderr)
            self._child = None

    def restore(self) -> None:
        if self._child is None:
            return
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._child.stdin.close()
        try:
            self._child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._child.kill()
        self._child = None


def _forward(host: str, port: int, rank: int, task_id: int) -> None:
    from sparkml_par.launch.channel import RankChannel

    token = sys.stdin.buffer.readline().decode("ascii").strip()
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    out = sys.stdout.buffer
    for raw in sys.stdin.buffer:
        out.write(raw)
        out.flush()
        line = raw.decode("utf-8", "replace").rstrip()
        if line:
            tail.append(line)
    if tail:
        channel = RankChannel((host, port), token, rank)
        channel.send("stderr_tail", lines=list(tail), task_id=task_id)
        channel.close()


if __name__ == "__main__":
    _forward(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
