"""The dataset's `_manifest.json`, its fingerprint, and the atomic publish of a finished dataset.

Every file operation goes through Hadoop's FileSystem API so that the same code works on any URL
Spark reads (file://, hdfs://, s3a://, dbfs:/). A dataset is built in a temporary sibling directory
and only renamed into place once complete, with `_manifest.json` written last: a directory without
a manifest is never a dataset.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import uuid
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlparse

from sparkml_par.config import DataConfig
from sparkml_par.errors import SparkmlParError

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MANIFEST_NAME = "_manifest.json"
# Fields that say where or how to write, not what the dataset holds: they must not change its identity.
_NOT_IN_FINGERPRINT = ("output", "mode")


def qualify_url(path: str) -> str:
    """A URL with a scheme: bare local paths become absolute file:// URLs (petastorm needs a scheme)."""
    if urlparse(path).scheme:
        return path.rstrip("/")
    return "file://" + os.path.abspath(path)


class HadoopFs:
    """The Hadoop FileSystem of one URL, through the session's JVM."""

    def __init__(self, spark, url: str):
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()
        self.url = url
        self._fs = self.path(url).getFileSystem(self._conf)

    def path(self, url: str):
        return self._jvm.org.apache.hadoop.fs.Path(url)

    def exists(self, url: str) -> bool:
        return bool(self._fs.exists(self.path(url)))

    def glob(self, url: str) -> list:
        return list(self._fs.globStatus(self.path(url)) or [])

    def list_files(self, url: str) -> list[tuple[str, int, int]]:
        """(path, size, modification time) of every visible file under url, sorted by path."""
        found = []
        for status in self.glob(url):
            iterator = self._fs.listFiles(status.getPath(), True)
            while iterator.hasNext():
                item = iterator.next()
                name = item.getPath().getName()
                if not name.startswith(("_", ".")):
                    found.append((item.getPath().toString(), int(item.getLen()), int(item.getModificationTime())))
        return sorted(found)

    def mkdirs(self, url: str) -> None:
        self._fs.mkdirs(self.path(url))

    def rename(self, src: str, dst: str) -> bool:
        return bool(self._fs.rename(self.path(src), self.path(dst)))

    def delete(self, url: str) -> None:
        self._fs.delete(self.path(url), True)

    def write_text(self, url: str, text: str) -> None:
        stream = self._fs.create(self.path(url), True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()

    def read_text(self, url: str) -> str:
        stream = self._fs.open(self.path(url))
        try:
            return self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()


def fingerprint(cfg: DataConfig, input_fingerprint: str) -> str:
    """Hash of what defines the dataset: the data config (less where it is written) and the input."""
    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in _NOT_IN_FINGERPRINT}
    # Synthetic rows do not depend on how many partitions generate them.
    settings["synthetic"].pop("partitions")
    text = json.dumps({"data": settings, "input": input_fingerprint, "format_version": FORMAT_VERSION},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def hash_parts(parts: Any) -> str:
    """A short stable hash of JSON-serialisable parts (file listings, built-in source parameters)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_manifest(spark, dataset_url: str) -> dict[str, Any] | None:
    """The manifest of a published dataset, or None when the directory holds no manifest."""
    url = f"{qualify_url(dataset_url)}/{MANIFEST_NAME}"
    fs = HadoopFs(spark, url)
    if not fs.exists(url):
        return None
    return json.loads(fs.read_text(url))


def write_json(fs: HadoopFs, url: str, payload: dict[str, Any]) -> None:
    fs.write_text(url, json.dumps(payload, indent=2, sort_keys=False) + "\n")


def check_existing_output(spark, output_url: str, new_fingerprint: str, mode: str) -> dict[str, Any] | None:
    """The existing manifest when it matches (a no-op re-run); raises when the output holds something else."""
    fs = HadoopFs(spark, output_url)
    if not fs.exists(output_url):
        return None
    manifest = read_manifest(spark, output_url)
    if manifest is not None and manifest.get("fingerprint") == new_fingerprint:
        return manifest
    if mode == "overwrite":
        return None
    if manifest is None:
        raise SparkmlParError(
            f"data.output {output_url!r} already exists and is not a dataset (no {MANIFEST_NAME}); "
            f"choose another data.output, remove it, or set data.mode=overwrite to replace it")
    raise SparkmlParError(
        f"data.output {output_url!r} already holds a dataset built from a different config or input "
        f"(fingerprint {manifest.get('fingerprint')!r}, created {manifest.get('created')!r}; this run's "
        f"fingerprint is {new_fingerprint!r}); choose another data.output or set data.mode=overwrite")


def clear_leftovers(spark, output_url: str) -> None:
    """Clears what a killed run left beside the output (one job writes an output at a time): its
    staging is deleted, and an old output it had moved aside is put back if nothing replaced it."""
    fs = HadoopFs(spark, output_url)
    for retired in fs.glob(f"{output_url}.old-*"):
        if not fs.exists(output_url):
            log.warning("restoring %s from %s, moved aside by a run that did not finish", output_url, retired.getPath())
            fs.rename(retired.getPath().toString(), output_url)
        else:
            fs.delete(retired.getPath().toString())
    for leftover in fs.glob(f"{output_url}.tmp-*"):
        log.warning("deleting %s, left beside %s by a run that did not finish", leftover.getPath(), output_url)
        fs.delete(leftover.getPath().toString())


def staging_url(output_url: str) -> str:
    """A fresh temporary sibling of the output: same filesystem, so publishing is a rename."""
    return f"{output_url}.tmp-{uuid.uuid4().hex[:12]}"


def create_staging(spark, output_url: str) -> str:
    """Creates the staging directory, or says clearly why the output location is not writable."""
    url = staging_url(output_url)
    fs = HadoopFs(spark, url)
    try:
        fs.mkdirs(url)
        fs.write_text(f"{url}/_writable_check", "")
        fs.delete(f"{url}/_writable_check")
    except Exception as exc:  # py4j wraps the JVM's IOException; its first line names the cause
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SparkmlParError(
            f"cannot write to data.output {output_url!r} (tried to create {url!r}): {cause}; "
            f"choose a writable data.output") from None
    return url


def publish(spark, staging: str, output_url: str, manifest: dict[str, Any]) -> None:
    """Writes the manifest last, then renames the staging directory onto the output."""
    write_json(HadoopFs(spark, output_url), f"{staging}/{MANIFEST_NAME}", manifest)
    replace_directory(spark, staging, output_url, "dataset")


def replace_directory(spark, staging: str, url: str, what: str) -> None:
    """Renames a finished staging directory onto url; what was there is moved aside first, deleted last."""
    fs = HadoopFs(spark, url)
    retired = None
    if fs.exists(url):
        retired = f"{url}.old-{uuid.uuid4().hex[:12]}"
        if not fs.rename(url, retired):
            raise SparkmlParError(f"could not move the old {what} {url!r} aside to {retired!r}; "
                                  f"check permissions on its parent directory")
    if not fs.rename(staging, url):
        raise SparkmlParError(f"could not rename {staging!r} to {url!r}; the finished {what} is "
                              f"left at {staging!r}")
    if retired is not None:
        fs.delete(retired)
