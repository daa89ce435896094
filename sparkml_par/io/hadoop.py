"""Files outside the datasets' own Parquet: through Hadoop's FileSystem, so any URL Spark reads works.

Every operation goes through the session's JVM (file://, hdfs://, s3a://, dbfs:/), and every output
is built in a temporary sibling and renamed into place once complete: a reader never sees half of it.
`clear_leftovers` cleans up after a run that was killed between the two.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from typing import Any
from urllib.parse import urlparse

from sparkml_par.errors import SparkmlParError

log = logging.getLogger(__name__)


def qualify_url(path: str) -> str:
    """A URL with a scheme: bare local paths become absolute file:// URLs (petastorm needs a scheme)."""
    if urlparse(path).scheme:
        return path.rstrip("/")
    return "file://" + os.path.abspath(path)


class HadoopFs:
    """The Hadoop FileSystem of one URL, through the session's JVM."""

    def __init__(self, spark, url: str):
        self._jvm = spark.sparkContext._jvm
        # Py4J resolves a dotted class name one package per round trip: look Path up once, not per call.
        self._path_class = self._jvm.org.apache.hadoop.fs.Path
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()
        self.url = url
        self._fs = self.path(url).getFileSystem(self._conf)

    def path(self, url: str):
        return self._path_class(url)

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

    def mkdirs(self, url: str) -> bool:
        return bool(self._fs.mkdirs(self.path(url)))

    def rename(self, src: str, dst: str) -> bool:
        return bool(self._fs.rename(self.path(src), self.path(dst)))

    def delete(self, url: str) -> None:
        self._fs.delete(self.path(url), True)

    def write_text(self, url: str, text: str) -> None:
        self.write_bytes(url, text.encode("utf-8"))

    def write_bytes(self, url: str, data: bytes) -> None:
        stream = self._fs.create(self.path(url), True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    def read_text(self, url: str) -> str:
        stream = self._fs.open(self.path(url))
        try:
            return self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()


def write_json(fs: HadoopFs, url: str, payload: dict[str, Any]) -> None:
    fs.write_text(url, json.dumps(payload, indent=2, sort_keys=False) + "\n")


def write_empty_parquet(spark, schema, url: str) -> None:
    """An empty Parquet dataset of a Spark schema at url, as Spark writes a DataFrame without rows (one file
    of the schema), written from the driver: a Spark write would plan a query and run a job for no rows."""
    import io

    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    buffer = io.BytesIO()
    pq.write_table(to_arrow_schema(schema).empty_table(), buffer)
    fs = HadoopFs(spark, url)
    fs.mkdirs(url)
    fs.write_bytes(f"{url}/part-00000.parquet", buffer.getvalue())


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


def create_staging(spark, output_url: str, setting: str) -> str:
    """Creates the staging directory, or says clearly why the output location is not writable."""
    url = staging_url(output_url)
    fs = HadoopFs(spark, url)
    try:
        if not fs.mkdirs(url):
            raise OSError("the filesystem refused to create it")
        fs.write_text(f"{url}/_writable_check", "")
        fs.delete(f"{url}/_writable_check")
    except Exception as exc:  # py4j wraps the JVM's IOException, which names the cause
        java = getattr(exc, "java_exception", None)
        cause = (
            java.toString()
            if java is not None
            else str(exc).strip().splitlines()[0]
            if str(exc).strip()
            else type(exc).__name__
        )
        raise SparkmlParError(
            f"cannot write to {setting} {output_url!r} (tried to create {url!r}): {cause}; choose a writable {setting}"
        ) from None
    return url


def check_writable_url(spark, output_url: str, setting: str) -> None:
    """Proves that output_url's location takes a staging directory, before the work that would fill it."""
    staging = create_staging(spark, output_url, setting)
    HadoopFs(spark, staging).delete(staging)


def replace_directory(spark, staging: str, url: str, what: str) -> None:
    """Renames a finished staging directory onto url; what was there is moved aside first, deleted last."""
    fs = HadoopFs(spark, url)
    retired = None
    if fs.exists(url):
        retired = f"{url}.old-{uuid.uuid4().hex[:12]}"
        if not fs.rename(url, retired):
            raise SparkmlParError(
                f"could not move the old {what} {url!r} aside to {retired!r}; check permissions on its parent directory"
            )
    if not fs.rename(staging, url):
        raise SparkmlParError(f"could not rename {staging!r} to {url!r}; the finished {what} is left at {staging!r}")
    if retired is not None:
        fs.delete(retired)
