"""A real S3-protocol server on loopback for the remote-storage tests: moto's server, one bucket per test.

Its address is chosen when conftest is imported, before the SparkSession starts, and put in the
environment (AWS_ENDPOINT_URL and test credentials): Spark's Python workers and the Horovod ranks inherit
it, as a cluster's executors inherit the AWS_* variables the cluster sets. The server itself starts only
when a test asks for a bucket.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Iterator

ACCESS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    # No instance-metadata lookups on a machine that is not in a cloud.
    "AWS_EC2_METADATA_DISABLED": "true",
}


def reserve_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class S3Server:
    def __init__(self, port: int):
        self.port = port
        self.endpoint = f"http://127.0.0.1:{port}"
        self._server = None
        self._lock = threading.Lock()
        self._names = itertools.count()

    def _started(self):
        with self._lock:
            if self._server is None:
                from moto.server import ThreadedMotoServer

                self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
                self._server.start()
            return self._server

    def client(self):
        import boto3

        self._started()
        return boto3.client("s3", endpoint_url=self.endpoint)

    def new_bucket(self) -> str:
        """A fresh, empty bucket; its s3:// URL."""
        name = f"test-bucket-{next(self._names)}"
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"

    def uploads_in_progress(self, bucket_url: str) -> int:
        answer = self.client().list_multipart_uploads(Bucket=bucket_url.removeprefix("s3://"))
        return len(answer.get("Uploads", []))

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()


@contextlib.contextmanager
def refusing_server() -> Iterator[str]:
    """A second moto server, in its own process, that checks every request's credentials (IAM on, no users):
    what a cluster's S3 does with missing or wrong credentials. Yields its endpoint."""
    port = reserve_port()
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="0")
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "the refusing S3 server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait()
