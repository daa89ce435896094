"""The petastorm patch for pyarrow >= 15: applied once, verified after, refused on a petastorm it was not written for.

Each test patches a copy of this environment's petastorm: unpatched on the pinned stack (pyarrow 14), patched
by `make setup` on the current one. That the patched petastorm reads and writes the project's datasets is
what the rest of the suite shows on the current stack.
"""

import shutil

import pytest

from sparkml_par.petastorm_patch import COMPAT_MODULE, COMPAT_SOURCE, MARKER, PatchError, installed_package, patch


@pytest.fixture
def package(tmp_path):
    copy = tmp_path / "petastorm"
    shutil.copytree(installed_package(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _patched(package) -> bool:
    return MARKER in (package / "utils.py").read_text()


def test_petastorm_is_patched_once_then_verified(package):
    if not _patched(package):
        written = patch(package)
        assert {"utils.py", "reader.py", "unischema.py", "hdfs/namenode.py", COMPAT_MODULE} <= set(written)
    utils = (package / "utils.py").read_text()
    assert "from petastorm.pyarrow_compat import LocalFileSystem" in utils and "pyarrow.filesystem" not in utils
    assert "np.string_" not in (package / "unischema.py").read_text()
    assert (package / COMPAT_MODULE).read_text() == COMPAT_SOURCE.read_text()
    assert patch(package) == []  # a second run only verifies


def test_a_petastorm_whose_text_differs_is_refused_and_left_as_it_was(package):
    if _patched(package):
        utils = package / "utils.py"
        utils.write_text(utils.read_text().replace("from petastorm.pyarrow_compat import LocalFileSystem", "#"))
        expected = r"utils.py: marked as patched but lacks 'from petastorm.pyarrow_compat import LocalFileSystem'"
    else:
        reader = package / "reader.py"
        reader.write_text(reader.read_text().replace("from pyarrow import parquet as pq\n", "import pyarrow.parquet\n"))
        expected = r"reader.py: 1 occurrence\(s\) of 'from pyarrow import parquet as pq' expected, 0 found"
    before = {path: path.read_text() for path in package.rglob("*.py")}
    with pytest.raises(PatchError, match=expected):
        patch(package)
    assert {path: path.read_text() for path in package.rglob("*.py")} == before


def test_another_petastorm_version_is_refused(package):
    init = package / "__init__.py"
    init.write_text(init.read_text().replace("__version__ = '0.12.1'", "__version__ = '0.13.1'"))
    with pytest.raises(PatchError, match=r"petastorm 0.13.1 at .*: the patch is written for 0.12.1 only"):
        patch(package)
