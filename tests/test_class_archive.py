"""The driver JVM a project session starts maps Spark's classes from the class-data archive written for it."""

import json
import os
import subprocess
import sys

from sparkml_par.spark_runtime import class_archive
from sparkml_par.spark_runtime.session import SPARK_LOG_CONFIG

# A fresh process: the project's session, then what its driver JVM was started with.
_SESSION_REPORT = """
import json
from sparkml_par.config import SparkConfig
from sparkml_par.spark_runtime.session import get_or_create_session

spark, _ = get_or_create_session(SparkConfig())
jvm = spark.sparkContext._jvm
arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
print(json.dumps({"arguments": arguments, "classpath": jvm.java.lang.System.getProperty("java.class.path")}))
spark.stop()
"""


def _without_class_data_options(env):
    env = dict(env)
    env.pop("SPARK_SUBMIT_OPTS", None)  # -Xshare:off here, or the suite's session's own archive
    return env


def test_a_written_archive_is_mapped_by_the_next_fresh_session(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    # A class-data setting already in the options (a session of this process put its archive there) would
    # make HotSpot refuse to dump: the writer's JVM runs with its own setting only.
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Xshare:off -Dlog4j2.configurationFile=" + str(SPARK_LOG_CONFIG.as_uri()))
    archive = class_archive.write_archive()

    assert archive.parent == tmp_path / "sparkml_par" / "class-archives"
    record = json.loads(archive.with_suffix(".json").read_text())
    assert record == {"size": archive.stat().st_size, "jars": str(class_archive.spark_jars().resolve())}
    assert sorted(archive.parent.iterdir()) == [archive, archive.with_suffix(".json")]  # no work left behind
    assert class_archive.write_archive() == archive  # found whole: not written again
    report = subprocess.run(
        [sys.executable, "-c", _SESSION_REPORT],
        env=_without_class_data_options(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    started = json.loads(report.stdout.strip().splitlines()[-1])
    assert f"-XX:SharedArchiveFile={archive}" in started["arguments"]
    # HotSpot told to share or fail starts only when it can map the archive for that class path.
    mapped = subprocess.run(
        [str(class_archive.java_executable()), "-Xshare:on", f"-XX:SharedArchiveFile={archive}"]
        + ["-cp", started["classpath"], "-version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert mapped.returncode == 0, mapped.stderr


def test_an_archive_without_its_recorded_size_is_never_used(tmp_path, monkeypatch):
    """HotSpot crashes on a truncated archive (SIGBUS): one cut short, or never recorded, is left alone."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    archive = class_archive.archive_path()
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"\0" * 1000)

    env = {"SPARK_SUBMIT_OPTS": "-Dlog4j2.configurationFile=x"}
    assert class_archive.use_class_archive(env) is None  # no recorded size
    archive.with_suffix(".json").write_text(json.dumps({"size": 4096}))
    assert class_archive.use_class_archive(env) is None  # shorter than recorded
    assert env == {"SPARK_SUBMIT_OPTS": "-Dlog4j2.configurationFile=x"}

    archive.with_suffix(".json").write_text(json.dumps({"size": 1000}))
    assert class_archive.use_class_archive(env) == archive
    assert env == {"SPARK_SUBMIT_OPTS": f"-Dlog4j2.configurationFile=x -XX:SharedArchiveFile={archive}"}


def test_a_users_own_class_data_setting_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    archive = class_archive.archive_path()
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"\0" * 10)
    archive.with_suffix(".json").write_text(json.dumps({"size": 10}))

    for options in ("-Xshare:off", "-XX:SharedArchiveFile=/opt/mine.jsa", "-XX:ArchiveClassesAtExit=/tmp/new.jsa"):
        env = {"SPARK_SUBMIT_OPTS": options}
        assert class_archive.use_class_archive(env) is None
        assert env == {"SPARK_SUBMIT_OPTS": options}


def _fake_spark_jars(tmp_path, monkeypatch):
    jars = tmp_path / "pyspark" / "jars"
    jars.mkdir(parents=True)
    for name in ("spark-core.jar", "spark-sql.jar"):
        (jars / name).write_bytes(b"jar")
    monkeypatch.setattr(class_archive, "spark_jars", lambda: jars)
    return jars


def test_jars_installed_again_name_another_archive(tmp_path, monkeypatch):
    """HotSpot refuses an archive when a jar's time differs (a fresh clone's virtual environment installs
    the same jars at a new time): such an installation must not find the old archive."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    jars = _fake_spark_jars(tmp_path, monkeypatch)
    before = class_archive.archive_path()
    assert class_archive.archive_path() == before
    stat = (jars / "spark-sql.jar").stat()
    os.utime(jars / "spark-sql.jar", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert class_archive.archive_path() != before


def test_writing_an_archive_removes_those_no_session_can_map(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    jars = _fake_spark_jars(tmp_path, monkeypatch)
    other_jars = tmp_path / "other-venv" / "jars"
    other_jars.mkdir(parents=True)
    cache = class_archive.cache_dir()
    cache.mkdir(parents=True)

    def archive(name, record):
        path = cache / f"spark-driver-{name}.jsa"
        path.write_bytes(b"\0" * 10)
        path.with_suffix(".json").write_text(json.dumps(record))
        return path

    kept = archive("new", {"size": 10, "jars": str(jars)})
    same_directory = archive("old", {"size": 10, "jars": str(jars)})
    directory_gone = archive("gone", {"size": 10, "jars": str(tmp_path / "deleted-venv" / "jars")})
    earlier_naming = archive("unnamed", {"size": 10})
    another_install = archive("other", {"size": 10, "jars": str(other_jars)})

    removed = class_archive.remove_replaced_archives(kept, str(jars))

    assert sorted(removed) == sorted([same_directory, directory_gone, earlier_naming])
    left = sorted(path.name for path in cache.iterdir())
    expected = [another_install.name, another_install.with_suffix(".json").name]
    assert left == sorted(expected + [kept.name, kept.with_suffix(".json").name])
