"""Installing the package into an environment that already has its stack changes none of that stack.

This is what `%pip install` on a Databricks runtime does: the runtime brings its own Spark, pyarrow, numpy
and torch, and an install that downgraded any of them would break the runtime. pip resolves the package's
requirements against the running environment (either tested stack) offline, without building anything;
a requirement the environment does not satisfy fails the resolution, as it would ask for a download.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("target", [".", ".[mlflow]"])
def test_installing_the_package_keeps_the_environment_s_own_packages(tmp_path, target):
    report = tmp_path / "report.json"
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-build-isolation", "--quiet"]
    result = subprocess.run([*pip, "--report", str(report), target], cwd=ROOT, capture_output=True, text=True)

    assert result.returncode == 0, result.stderr
    installs = json.loads(report.read_text())["install"]
    assert [item["metadata"]["name"] for item in installs] == ["sparkml-par"]
