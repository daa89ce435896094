"""A line channel between the ranks and the driver: logs, lifecycle events and progress, while a stage runs.

Spark only returns a task's output when the stage ends; users need rank logs, failures and per-epoch
progress as they happen. The channel also relays rank 0's rendezvous address to the other ranks: a
Spark barrier `allGather` would do the same but costs about a second (its coordinator polls). The
driver listens on its own Spark address (never all interfaces) on an ephemeral port for the duration
of one launch; each rank connects, proves it belongs to this launch with a random token, and sends
JSON lines. Nothing received is executed or unpickled. Two questions get an answer: rank 0's rendezvous
address, and the cluster's task slots now (so ranks running on fewer slots than wanted know when to grow).

When Spark retries a failed barrier stage, the new attempt's ranks connect to the same channel. Task
attempt ids only grow, so a "started" with an id above every id of a failed attempt begins the next
attempt with a fresh status, and late messages of the failed attempt's connections are dropped. Such a
rank waits for its answer until the supervisor has decided on the failed attempt: it runs on when the
failure calls for another attempt, and is turned away when the launch ends instead.
"""

from __future__ import annotations

import copy
import hmac
import json
import logging
import secrets
import socket
import socketserver
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

log = logging.getLogger("sparkml_par.rank")

# What a rank raises when another rank's process vanished under a collective.
PEER_LOST_ERRORS = ("HorovodInternalError",)


@dataclass
class RankStatus:
    """What the driver knows about each rank, filled in as events arrive."""

    started: dict[int, float] = field(default_factory=dict)
    joining: dict[int, float] = field(default_factory=dict)
    initialized: dict[int, float] = field(default_factory=dict)
    finished: dict[int, float] = field(default_factory=dict)
    failures: dict[int, dict[str, Any]] = field(default_factory=dict)
    hosts: dict[int, str] = field(default_factory=dict)
    last_seen: dict[int, float] = field(default_factory=dict)  # any message, heartbeats included
    last_progress: dict[int, dict[str, Any]] = field(default_factory=dict)
    # Ranks whose connection closed without "finished" or "failed": their process died.
    lost: dict[int, float] = field(default_factory=dict)
    # The last lines each rank's process wrote to its native stderr (see native_stderr), once it ended.
    stderr_tails: dict[int, list[str]] = field(default_factory=dict)
    attempt: int = 1
    since: float = field(default_factory=time.monotonic)

    def copy(self) -> "RankStatus":
        """A copy no handler thread mutates: what the supervisor decides on."""
        return copy.deepcopy(self)

    def first_failure(self) -> dict[str, Any] | None:
        """The failure that arrived first: the others are usually ranks losing their peer in a collective."""
        return min(self.failures.values(), key=lambda f: f["received"], default=None)

    @property
    def failed(self) -> bool:
        return bool(self.failures or self.lost)

    def retryable(self) -> bool:
        """A rank process died (or a peer saw it vanish): a new attempt may succeed. An exception raised by
        the rank's own code would only repeat, so it is not retried."""
        first = self.first_failure()
        if self.lost and (first is None or min(self.lost.values()) <= first["received"]):
            return True
        return first is not None and first.get("error", "").startswith(PEER_LOST_ERRORS)


@dataclass(frozen=True)
class ChannelSnapshot:
    """The channel's state at one moment, taken under its lock."""

    status: RankStatus
    # The failed attempt's stderr tails, also those that arrived after the next attempt started.
    previous_stderr_tails: dict[int, list[str]]


class DriverChannel:
    """Receives rank messages. Handler threads only record what arrives; the supervisor reads it through
    `snapshot()` and `take_progress()` and runs the user's progress callback on its own thread."""

    def __init__(self, host: str, attempts: int = 1, slots: Callable[[], int] | None = None):
        self.token = secrets.token_hex(16)
        self._slots = slots
        self._status = RankStatus()
        self._attempts = attempts
        self._attempt_max_task_id = -1
        self._stale_below = -1
        self._progress: list[tuple[int, dict]] = []
        self._lock = threading.Lock()
        self._handlers: list[threading.Thread] = []
        self._rendezvous_address: list | None = None
        self._rendezvous_known = threading.Event()
        self._previous_stderr_tails: dict[int, list[str]] = {}
        self._reruns_admitted: set[int] = set()  # failed attempts the supervisor lets Spark run again
        self._reruns_refused = False
        self._decided = threading.Condition(self._lock)
        self._server = _Server((host, 0), _handler_for(self))
        self.address = self._server.server_address[:2]
        self._closed_down = False
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="rank-channel", daemon=True
        )
        self._thread.start()

    def snapshot(self) -> ChannelSnapshot:
        with self._lock:
            return ChannelSnapshot(self._status.copy(), copy.deepcopy(self._previous_stderr_tails))

    def take_progress(self) -> list[tuple[int, dict]]:
        """The (rank, record) progress records that arrived since the last call, in arrival order."""
        with self._lock:
            records, self._progress = self._progress, []
        return records

    def admit_rerun(self, attempt: int) -> None:
        """The supervisor's word that failed attempt `attempt` may run again: the new attempt's ranks go on."""
        with self._decided:
            self._reruns_admitted.add(attempt)
            self._decided.notify_all()

    def refuse_reruns(self) -> None:
        """The launch is over: the ranks of an attempt Spark starts from now on are turned away."""
        with self._decided:
            self._reruns_refused = True
            self._decided.notify_all()

    def close(self) -> None:
        """Stops listening; called again, does nothing."""
        if self._closed_down:
            return
        self._closed_down = True
        self.refuse_reruns()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        # Ranks close their end when they finish: let their last lines arrive, without waiting forever.
        for handler in list(self._handlers):
            handler.join(timeout=2.0)

    def __enter__(self) -> "DriverChannel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _closed(self, rank: int, task_id: int) -> None:
        with self._lock:
            if task_id < self._stale_below:
                return
            if rank >= 0 and rank not in self._status.finished and rank not in self._status.failures:
                self._status.lost[rank] = time.time()

    def _cluster_slots(self) -> int | None:
        try:
            return self._slots() if self._slots is not None else None
        except Exception as exc:  # a rank's question must not end the driver's handler
            log.warning("cannot tell a rank the cluster's task slots: %s", exc)
            return None

    def _wait_for_rendezvous(self, timeout: float, task_id: int) -> list | None:
        self._rendezvous_known.wait(timeout)
        return None if task_id < self._stale_below else self._rendezvous_address

    def _admit(self, task_id: int) -> bool:
        """Whether a rank that says it started may run. A rank of the attempt Spark starts after a failure
        waits here for the supervisor's decision on the failed attempt."""
        with self._decided:
            while (
                self._after_failed_attempt(task_id)
                and self._status.attempt not in self._reruns_admitted
                and not self._reruns_refused
            ):
                self._decided.wait()
            return not self._reruns_refused

    def _after_failed_attempt(self, task_id: int) -> bool:
        """With the lock held: task_id belongs to a stage attempt after the failed one, and attempts are left."""
        return self._status.failed and self._status.attempt < self._attempts and task_id > self._attempt_max_task_id

    def _start_next_attempt(self, task_id: int) -> None:
        """Called with the lock held when a rank of a new stage attempt says it started."""
        if self._after_failed_attempt(task_id) and self._status.retryable():
            self._stale_below = self._attempt_max_task_id + 1
            self._previous_stderr_tails = dict(self._status.stderr_tails)
            self._status = RankStatus(attempt=self._status.attempt + 1)
            self._attempt_max_task_id = -1
            self._rendezvous_address = None
            self._rendezvous_known.clear()

    def _receive(self, message: dict, task_id: int = 0) -> None:
        rank = int(message.get("rank", -1))
        kind = message.get("type")
        now = time.time()
        with self._lock:
            if kind == "started":
                self._start_next_attempt(task_id)
            if kind == "stderr_tail":
                tails = self._previous_stderr_tails if task_id < self._stale_below else self._status.stderr_tails
                tails[rank] = list(message.get("lines", []))
                return
            if task_id < self._stale_below:
                return
            self._status.last_seen[rank] = now
            if kind == "log":
                log.info("[rank %d] %s", rank, message.get("line", ""))
            elif kind == "started":
                self._status.started[rank] = now
                self._status.hosts[rank] = message.get("host", "?")
                self._attempt_max_task_id = max(self._attempt_max_task_id, task_id)
            elif kind == "joining":
                self._status.joining[rank] = now
            elif kind == "initialized":
                self._status.initialized[rank] = now
            elif kind == "finished":
                self._status.finished[rank] = now
            elif kind == "failed":
                self._status.failures[rank] = {**message, "received": now}
            elif kind == "rendezvous":
                self._rendezvous_address = list(message["address"])
                self._rendezvous_known.set()
            elif kind == "progress":
                self._status.last_progress[rank] = message.get("record", {})
                self._progress.append((rank, message.get("record", {})))


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _handler_for(channel: DriverChannel):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            channel._handlers.append(threading.current_thread())
            first = self.rfile.readline(256).decode("ascii", "replace").strip()
            if not hmac.compare_digest(first, channel.token):
                return
            rank, task_id, started = -1, 0, False
            for raw in self.rfile:
                try:
                    message = json.loads(raw)
                except ValueError:
                    continue
                rank = int(message.get("rank", rank))
                task_id = int(message.get("task_id", task_id))
                if message.get("type") == "started":
                    started = channel._admit(task_id)
                    if started:
                        channel._receive(message, task_id)
                    self._answer({"admitted": started})
                elif message.get("type") == "await_rendezvous":
                    address = channel._wait_for_rendezvous(float(message.get("timeout", 60)), task_id)
                    self._answer({"address": address})
                elif message.get("type") == "slots":
                    self._answer({"slots": channel._cluster_slots()})
                else:
                    channel._receive(message, task_id)
            if started:  # a rank's own connection; the stderr forwarder's closing says nothing
                channel._closed(rank, task_id)

        def _answer(self, reply: dict) -> None:
            self.wfile.write(json.dumps(reply).encode() + b"\n")
            self.wfile.flush()

    return Handler


class RankChannel:
    """The rank's end. Sending never raises: a lost channel must not fail training."""

    def __init__(self, address: tuple[str, int] | None, token: str, rank: int):
        self.rank = rank
        self._lock = threading.Lock()
        self._sock = None
        if address is not None:
            try:
                self._sock = socket.create_connection(tuple(address), timeout=10)
                self._sock.sendall(token.encode("ascii") + b"\n")
            except OSError as exc:
                print(f"[rank {rank}] cannot reach the driver's log channel at {address}: {exc}", file=sys.stderr)
                self._sock = None

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def send(self, kind: str, **payload: Any) -> None:
        message = json.dumps({"rank": self.rank, "type": kind, **payload}, default=str) + "\n"
        with self._lock:
            if self._sock is None:
                return
            try:
                self._sock.sendall(message.encode("utf-8"))
            except OSError:
                self._sock = None

    def start(self, timeout: float, **payload: Any) -> bool:
        """Says the rank started; False when the driver turns it away (its launch ended). A rank of a stage
        attempt Spark runs after a failure waits here until the driver has decided to run it."""
        if self._sock is None:
            return True
        try:
            return bool(self._ask("started", timeout, **payload).get("admitted", True))
        except (OSError, ValueError):
            return True

    def await_rendezvous(self, timeout: float) -> tuple[str, int]:
        """Rank 0's rendezvous address, relayed by the driver once rank 0 has published it."""
        if self._sock is None:
            raise RuntimeError(f"rank {self.rank} has no channel to the driver to learn the rendezvous address")
        reply = self._ask("await_rendezvous", timeout + 5, timeout=timeout)
        if not reply.get("address"):
            raise TimeoutError(f"rank {self.rank}: rank 0 did not publish the rendezvous address within {timeout:g} s")
        return reply["address"][0], int(reply["address"][1])

    def cluster_slots(self) -> int | None:
        """The cluster's task slots now, as the driver's Spark context counts them; None when unknown."""
        if self._sock is None:
            return None
        try:
            return self._ask("slots", 30.0).get("slots")
        except (OSError, ValueError):
            return None

    def _ask(self, kind: str, wait: float, **payload: Any) -> dict:
        """Sends a question and reads the driver's one-line answer, {} once the channel is lost (the main
        thread's; one at a time). Only the answer is waited for that long: sends keep their own timeout."""
        self.send(kind, **payload)
        sock = self._sock
        if sock is None:
            return {}
        timeout = sock.gettimeout()
        sock.settimeout(wait)
        try:
            return json.loads(sock.makefile("rb").readline() or b"{}")
        finally:
            sock.settimeout(timeout)

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


class ForwardingStream:
    """Replaces a rank's stdout/stderr: every complete line goes to the driver (or, without a channel,
    to the original stream, which on a cluster is the executor's log)."""

    def __init__(self, channel: RankChannel, original):
        self._channel = channel
        self._original = original
        self._buffer = ""

    def write(self, text: str) -> int:
        if not self._channel.connected:
            return self._original.write(text)
        self._buffer += text
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            self._channel.send("log", line=line)
        return len(text)

    def flush(self) -> None:
        self._original.flush()

    def isatty(self) -> bool:
        return False
