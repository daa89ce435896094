"""Fixtures shared by every test: one local SparkSession for the whole run, and a clean environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from s3_server import ACCESS, S3Server, reserve_port

from sparkml_par.config import SparkConfig
from sparkml_par.spark_runtime.session import get_or_create_session

# Spark's Python workers import functions defined in test modules by name, as executors would import a
# user's package: put the test directory on their path.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))
# The S3 server's address and test credentials, before any session or worker starts (tests/s3_server.py).
_S3 = S3Server(reserve_port())
os.environ.update(ACCESS, AWS_ENDPOINT_URL=_S3.endpoint)


@pytest.fixture(scope="session")
def s3():
    """The loopback S3 server (moto), started on first use."""
    yield _S3
    _S3.stop()


@pytest.fixture
def bucket(s3) -> str:
    """A fresh bucket of the loopback S3 server: its s3:// URL."""
    return s3.new_bucket()


@pytest.fixture(scope="session")
def spark_config() -> SparkConfig:
    # Two shuffle partitions: test data is tiny, and the project default of 8 only adds tasks.
    return SparkConfig(
        master="local[2]",
        app_name="sparkml_par-tests",
        conf={"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"},
    )


@pytest.fixture(scope="session")
def spark(spark_config):
    """The one SparkSession of the test run (starting one costs seconds), stopped at the end."""
    session, _ = get_or_create_session(spark_config)
    yield session
    session.stop()


def pytest_collection_modifyitems(items):
    """Tests that use the spark fixture carry the `spark` marker, so `-m "not spark"` runs the fast ones."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(autouse=True)
def _restore_environ():
    """Whatever a test sets in os.environ (JAVA_HOME, HOROVOD_*, ...) is gone before the next one."""
    saved = dict(os.environ)
    yield
    for name in set(os.environ) - set(saved):
        del os.environ[name]
    os.environ.update(saved)
