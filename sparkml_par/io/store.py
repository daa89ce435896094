"""Where the project's own Python code keeps files outside Spark: a directory at any URL pyarrow.fs opens.

Checkpoints, the model artifact, `metrics.jsonl`, the tuning study and its tables, the report and the run
state go through `Store`; datasets and predictions go through Spark's Hadoop filesystem (`hadoop`). A URL
is a plain path or `file://` (the local filesystem, or a mount every executor shares), `s3://`, `gs://`,
`hdfs://` (pyarrow's own filesystems), `dbfs:/` (Databricks' FUSE mount at /dbfs), or any other scheme
fsspec knows when fsspec and its plugin are installed (`abfs://` with adlfs). Credentials come from where
each library looks (the AWS environment variables and instance profile, Google's application default
credentials, the Hadoop configuration); `AWS_ENDPOINT_URL` points S3 at another server (MinIO, a test
server). No credential is ever read from the project's config files.

Every write is complete or absent. A file is written beside its name and renamed onto it where the
filesystem renames (local, HDFS); an object store has no rename, but an object appears only when its
upload completes, so a file is uploaded whole under its final name. A directory (the model artifact) is
published with `publish_directory`: on a local filesystem a staged sibling is renamed into place; on an
object store the files are uploaded to a staging prefix, copied into place, and a `_COMPLETE` marker is
written last, which readers of an object store require.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Iterator, Optional
from urllib.parse import urlparse

import pyarrow.fs as pafs

from sparkml_par.contract import COMPLETE_MARKER
from sparkml_par.errors import SparkmlParError
from sparkml_par.io import local_files

OBJECT_STORE_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl"})


def is_local(url: str) -> bool:
    """A plain path, file:// or dbfs:/ (the mount): plain file I/O and atomic renames work there."""
    return urlparse(url).scheme in ("", "file", "dbfs")


def local_path(url: str) -> Path:
    """The absolute local path of a local URL (dbfs:/x is /dbfs/x, Databricks' mount of DBFS)."""
    parsed = urlparse(url)
    if parsed.scheme == "dbfs":
        return Path("/dbfs") / url.removeprefix("dbfs:").lstrip("/")
    return Path(url.removeprefix("file://")).absolute()


def _filesystem(scheme: str, netloc: str) -> pafs.FileSystem:
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
    return _cached_filesystem(scheme, netloc, endpoint if scheme in ("s3", "s3a") else "")


@functools.lru_cache(maxsize=None)
def _cached_filesystem(scheme: str, netloc: str, endpoint: str) -> pafs.FileSystem:
    """One filesystem per scheme, bucket/host and S3 endpoint for the process: S3 clients are costly to create."""
    if scheme in ("s3", "s3a"):
        options = {}
        if endpoint:
            parsed = urlparse(endpoint)
            options = {"endpoint_override": parsed.netloc or parsed.path, "scheme": parsed.scheme or "https"}
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        return pafs.S3FileSystem(region=region, **options)
    if scheme in ("gs", "gcs", "hdfs", "viewfs"):
        return pafs.FileSystem.from_uri(f"{scheme}://{netloc}/")[0]
    try:
        import fsspec
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        return PyFileSystem(FSSpecHandler(fsspec.filesystem(scheme)))
    except (ImportError, ValueError) as exc:
        raise SparkmlParError(
            f"no filesystem for URLs starting {scheme}:// ({exc}); use a local path, file://, s3://, gs://, "
            f"hdfs:// or dbfs:/, or install the fsspec package that handles {scheme}:// (adlfs for abfs://)"
        ) from None


class Store:
    """A directory at a URL. Names are relative paths inside it ('checkpoints/checkpoint-00003.pt')."""

    def __init__(self, url: str | os.PathLike):
        url = os.fspath(url)
        self.url = url.rstrip("/")
        if is_local(url):
            self.local: Optional[Path] = local_path(url)
            self.url = str(self.local)  # what every executor can open, whatever its working directory
            self.fs, self.root = pafs.LocalFileSystem(), str(self.local)
        else:
            parsed = urlparse(self.url)
            self.local = None
            self.fs = _filesystem(parsed.scheme, parsed.netloc)
            self.root = f"{parsed.netloc}{parsed.path}".rstrip("/")
            if parsed.scheme in ("hdfs", "viewfs"):
                self.root = parsed.path.rstrip("/")
        self.renames = urlparse(self.url).scheme not in OBJECT_STORE_SCHEMES

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def child(self, name: str) -> "Store":
        return Store(f"{self.url}/{name}")

    def _path(self, name: str = "") -> str:
        return f"{self.root}/{name}" if name else self.root

    def exists(self, name: str = "") -> bool:
        return self.fs.get_file_info(self._path(name)).type != pafs.FileType.NotFound

    def read_bytes(self, name: str) -> bytes:
        # A random-access file reads an object of known size in a few requests; pyarrow 14's input
        # stream fetches S3 objects in 256 kB ranges, one request each, many for a checkpoint.
        with self.fs.open_input_file(self._path(name)) as handle:
            return handle.read()

    def read_text(self, name: str) -> str:
        return self.read_bytes(name).decode("utf-8")

    def write_bytes(self, name: str, data: bytes) -> None:
        """Complete or absent: renamed into place where the filesystem renames, uploaded whole elsewhere."""
        if self.local is not None:
            path = self.local / name
            with local_files.atomic_path(path) as temp:
                with open(temp, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
            return
        parent = self._path(name).rsplit("/", 1)[0]
        if self.renames:
            self.fs.create_dir(parent, recursive=True)
            temp = f"{parent}/.{name.rsplit('/', 1)[-1]}.tmp-{uuid.uuid4().hex[:8]}"
            with self.fs.open_output_stream(temp) as stream:
                stream.write(data)
            self.fs.move(temp, self._path(name))
            return
        # An object store shows an object only once its upload completes: a killed writer leaves the old one.
        with self.fs.open_output_stream(self._path(name)) as stream:
            stream.write(data)

    def write_text(self, name: str, text: str) -> None:
        self.write_bytes(name, text.encode("utf-8"))

    def names(self, prefix: str = "") -> list[str]:
        """The names of the files directly under prefix (none when it does not exist)."""
        selector = pafs.FileSelector(self._path(prefix), allow_not_found=True)
        return sorted(info.base_name for info in self.fs.get_file_info(selector) if info.type == pafs.FileType.File)

    def delete(self, name: str) -> None:
        self.fs.delete_file(self._path(name))

    def delete_all(self) -> None:
        if self.exists():
            self.fs.delete_dir(self._path())

    def download(self, directory: Path) -> None:
        """Copies every file of this directory into a local directory (which it creates)."""
        directory.mkdir(parents=True, exist_ok=True)
        pafs.copy_files(
            self._path(), str(directory), source_filesystem=self.fs, destination_filesystem=pafs.LocalFileSystem()
        )

    def check_writable(self, setting: str) -> None:
        """Proves, before the work, that files can be written here; one error naming the URL and the fix."""
        if self.local is not None:
            local_files.check_writable_directory(self.local, setting)
            return
        bucket = self.root.split("/", 1)[0]
        try:
            object_store = urlparse(self.url).scheme in OBJECT_STORE_SCHEMES
            if object_store and self.fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                raise SparkmlParError(
                    f"cannot write to {setting} {self.url!r}: the bucket {bucket!r} does not exist; "
                    f"create it or set {setting} to a URL in a bucket you can write to"
                )
            probe = f".writable-check-{uuid.uuid4().hex[:12]}"
            self.write_bytes(probe, b"")
            self.delete(probe)
        except SparkmlParError:
            raise
        except Exception as exc:  # pyarrow's OSError names the service's answer (AccessDenied, no credentials)
            raise SparkmlParError(
                f"cannot write to {setting} {self.url!r}: {str(exc).strip().splitlines()[0]}; check the "
                f"credentials the cluster provides (for s3:// the AWS_* environment variables or the instance "
                f"profile, AWS_ENDPOINT_URL for another S3 server) and that they may write there"
            ) from None


class WorkingCopy:
    """A local directory standing for a directory URL, for writers that need one (sqlite, logging, the report).

    On a local filesystem it is the directory itself. Elsewhere it is a temporary directory holding the
    URL's top-level files when opened (so a run or a search continues where the last one stopped), and
    `push()` uploads every file in it, each whole, to the URL.
    """

    def __init__(self, url: str):
        self.store = Store(url)
        if self.store.local is not None:
            self.dir = self.store.local
            return
        self.dir = Path(tempfile.mkdtemp(prefix="sparkml_par-"))
        for name in self.store.names():
            (self.dir / name).write_bytes(self.store.read_bytes(name))

    def url(self, name: str) -> str:
        return f"{self.store.url}/{name}"

    def push(self) -> None:
        if self.store.local is not None:
            return
        for path in sorted(self.dir.rglob("*")):
            name = path.relative_to(self.dir)
            if path.is_file() and not any(part.startswith(".") for part in name.parts):
                self.store.write_bytes(name.as_posix(), path.read_bytes())

    def close(self) -> None:
        """Pushes a last time and removes the temporary directory."""
        self.push()
        if self.store.local is None:
            shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def local_file(url: str) -> Iterator[Path]:
    """A local path holding the file at url: the file itself on a local filesystem, else a temporary copy."""
    store = Store(url)
    if store.local is not None:
        yield store.local
        return
    parent, name = url.rstrip("/").rsplit("/", 1)
    with tempfile.TemporaryDirectory(prefix="sparkml_par-") as directory:
        path = Path(directory) / name
        path.write_bytes(Store(parent).read_bytes(name))
        yield path


def publish_directory(staging: Path, target: Store) -> None:
    """Makes a finished local directory the content of target, never half of one; the caller removes
    staging once this returns or fails (on a local disk it is renamed away).

    Local: staging is a sibling of target, renamed onto it (see `local_files.replace_directory`). Elsewhere:
    uploaded to a staging prefix first (the slow part; a killed upload leaves target as it was), then
    target's marker is removed, the files are copied into target, the ones it no longer has are deleted,
    and the marker is written last.
    """
    (staging / COMPLETE_MARKER).write_text(uuid.uuid4().hex)
    if target.local is not None:
        local_files.replace_directory(staging, target.local)
        return
    _delete_leftover_uploads(target)
    upload = Store(f"{target.url}.tmp-{uuid.uuid4().hex[:12]}")
    files = sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file())
    try:
        for name in files:
            if name != COMPLETE_MARKER:
                upload.write_bytes(name, (staging / name).read_bytes())
        if target.exists(COMPLETE_MARKER):
            target.delete(COMPLETE_MARKER)
        for name in files:
            if name != COMPLETE_MARKER:
                target.fs.copy_file(upload._path(name), target._path(name))
        for name in set(target.names()) - set(files):
            target.delete(name)
        target.write_bytes(COMPLETE_MARKER, (staging / COMPLETE_MARKER).read_bytes())
    finally:
        upload.delete_all()


def _delete_leftover_uploads(target: Store) -> None:
    """Staging prefixes a killed publish left beside target (one writer publishes a target at a time)."""
    parent, name = target.root.rsplit("/", 1)
    selector = pafs.FileSelector(parent, allow_not_found=True)
    for info in target.fs.get_file_info(selector):
        if info.type == pafs.FileType.Directory and info.base_name.startswith(f"{name}.tmp-"):
            target.fs.delete_dir(info.path)


def require_complete(target: Store, what: str, fix: str) -> None:
    """On an object store, a directory without its marker is being replaced, or was left half-copied."""
    if target.local is None and not target.exists(COMPLETE_MARKER):
        raise SparkmlParError(f"{what} {target.url!r} is incomplete (no {COMPLETE_MARKER} marker); {fix}")
