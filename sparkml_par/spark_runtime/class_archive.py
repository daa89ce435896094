"""A class-data archive for the driver JVM the project starts: Spark's classes mapped, not loaded.

A fresh driver JVM loads and verifies many thousands of classes from Spark's jars before and during its
first jobs. HotSpot can write the classes a run loaded into an archive at exit (`-XX:ArchiveClassesAtExit`,
application class-data sharing) and map them at the next start (`-XX:SharedArchiveFile`), which spares a
fresh session that loading and verifying at its start and in its first job. Nothing changes once the JVM
runs: the same classes, compiled by the same JIT.

`python -m sparkml_par.spark_runtime.class_archive` (run by `make setup`) writes the archive once for this JVM and this
Spark installation: it runs a small prepare in a session of its own and keeps what its JVM loaded. The
archive's name holds a digest of the JVM's files and of Spark's jars, their directory, sizes and modification
times (HotSpot maps an archive only for the class path it was written with, and checks each jar's size and
time), so another JDK, another Spark or another virtual environment, or the same one installed again, finds
no archive and starts as it always did. A session started by the project uses the archive when one exists
with the size recorded when it was written (HotSpot crashes on a truncated one), unless the user's
SPARK_SUBMIT_OPTS already choose a class-data setting. Writing an archive removes those it replaces: the
ones written for the same jars' directory, and those whose directory is gone (each holds every class a
session loaded, a large file).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import MutableMapping, Optional

from sparkml_par.io import local_files

# The JVM options that choose class-data sharing; a user who sets one keeps their own choice.
_CLASS_DATA_OPTIONS = ("-Xshare", "-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-XX:SharedClassListFile")
_DUMP_TIMEOUT_S = 600


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root, "sparkml_par", "class-archives")


def java_executable() -> Optional[Path]:
    """The java spark-class starts: $JAVA_HOME/bin/java, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home, "bin", "java")) if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def spark_jars() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home(), "jars")


def archive_path() -> Optional[Path]:
    """Where the archive of this JVM and these Spark jars is kept; None when no java is found."""
    java = java_executable()
    if java is None:
        return None
    digest = hashlib.sha256()
    # The JDK's class image and VM library identify its build; the jars' names and sizes, Spark's.
    java_home = java.parent.parent
    for part in (java, java_home / "lib" / "modules", java_home / "lib" / "server" / "libjvm.so"):
        stat = part.stat() if part.exists() else None
        digest.update(f"{part}:{stat.st_size if stat else 0}:{stat.st_mtime_ns if stat else 0}\n".encode())
    # HotSpot maps an archive only for the class path it was written with, each jar of the size and
    # modification time it had then (an installation again, as in a fresh clone's virtual environment,
    # has new times): the jars' directory, sizes and times are part of the name.
    jars = spark_jars().resolve()
    digest.update(f"{jars}\n".encode())
    for jar in sorted(jars.glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return cache_dir() / f"spark-driver-{digest.hexdigest()[:16]}.jsa"


def usable_archive() -> Optional[Path]:
    """This installation's archive when it exists whole."""
    path = archive_path()
    return path if path is not None and _is_whole(path) else None


def _is_whole(path: Path) -> bool:
    """Whether the archive's size is the one written beside it when it was made."""
    try:
        recorded = json.loads(path.with_suffix(".json").read_text())["size"]
        return path.stat().st_size == recorded
    except (OSError, ValueError, KeyError):
        return False


def _other_options(options: str) -> list[str]:
    """The JVM options less any class-data setting."""
    return [option for option in options.split() if not option.startswith(_CLASS_DATA_OPTIONS)]


def use_class_archive(env: MutableMapping[str, str]) -> Optional[Path]:
    """Adds the archive to the driver JVM's options in env (read by spark-class, as the log config is)
    when one is usable and the options choose no class-data setting of their own; returns it if added."""
    options = env.get("SPARK_SUBMIT_OPTS", "")
    if _other_options(options) != options.split():
        return None
    archive = usable_archive()
    if archive is not None:
        env["SPARK_SUBMIT_OPTS"] = f"{options} -XX:SharedArchiveFile={archive}".strip()
    return archive


# What the archive's JVM runs: the project's prepare of a few synthetic rows, then a JVM exit through
# pyspark's own path (the gateway exits when its stdin closes), at which HotSpot writes the archive.
_WORKLOAD = textwrap.dedent(
    """
    import sys
    from pyspark import SparkContext
    from data_prep.job import prepare
    from sparkml_par.config import load_config
    from sparkml_par.spark_runtime.session import get_or_create_session

    work = sys.argv[1]
    cfg = load_config(None, ["data.source=synthetic", "data.synthetic.rows=400", f"data.output={work}/dataset"])
    spark, _ = get_or_create_session(cfg.spark)
    prepare(spark, cfg.data)
    spark.read.parquet(f"{work}/dataset/train").groupBy("label").count().collect()
    spark.stop()
    gateway = SparkContext._gateway.proc
    gateway.stdin.close()
    sys.exit(gateway.wait())
    """
)


def write_archive() -> Path:
    """Writes this installation's archive (about a minute on two cores) unless a usable one exists."""
    path = archive_path()
    if path is None:
        raise RuntimeError("no java found (JAVA_HOME or PATH): Spark cannot start either")
    if _is_whole(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="class-archive-", dir=path.parent) as work:
        written = Path(work, "archive.jsa")
        env = dict(os.environ)
        # Its own setting only: HotSpot refuses to dump beside another archive or with sharing off.
        options = _other_options(env.get("SPARK_SUBMIT_OPTS", ""))
        env["SPARK_SUBMIT_OPTS"] = " ".join([*options, f"-XX:ArchiveClassesAtExit={written}"])
        log = Path(work, "dump.log")
        with log.open("w") as out:
            result = subprocess.run(
                [sys.executable, "-c", _WORKLOAD, work],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=_DUMP_TIMEOUT_S,
            )
        if result.returncode != 0 or not written.exists() or written.stat().st_size == 0:
            tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-20:])
            raise RuntimeError(f"the JVM wrote no class-data archive (exit {result.returncode}):\n{tail}")
        # The archive first, then its recorded size: a reader trusts the archive only when both agree.
        os.replace(written, path)
        jars = str(spark_jars().resolve())
        record = json.dumps({"size": path.stat().st_size, "jars": jars}) + "\n"
        local_files.write_text(path.with_suffix(".json"), record)
    remove_replaced_archives(path, jars)
    return path


def remove_replaced_archives(kept: Path, jars: str) -> list[Path]:
    """Removes the archives beside kept, just written for the jars' directory jars, that no session can map
    any more: written for the same directory (whose jars have changed since), for a directory that is gone,
    or without a recorded directory (an earlier naming). A JVM that maps one keeps its mapping. Returns the
    archives removed."""
    removed = []
    for record in sorted(kept.parent.glob("spark-driver-*.json")):
        archive = record.with_suffix(".jsa")
        if archive == kept:
            continue
        try:
            written_for = json.loads(record.read_text()).get("jars")
        except (OSError, ValueError):
            written_for = None
        if written_for is None or written_for == jars or not Path(written_for).is_dir():
            archive.unlink(missing_ok=True)
            record.unlink(missing_ok=True)
            removed.append(archive)
    return removed


def main() -> int:
    """Writes the archive; a failure is reported and leaves sessions starting as they do without one."""
    try:
        path = write_archive()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(
            f"sparkml_par.spark_runtime.class_archive: no archive written, Spark's driver JVM starts without one: "
            f"{exc}",
            file=sys.stderr,
        )
        return 0
    print(f"class-data archive for Spark's driver JVM: {path} ({path.stat().st_size / 2**20:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
