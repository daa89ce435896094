"""petastorm 0.12.1 on pyarrow >= 15 and numpy 2, at import time, without writing into the installed package.

petastorm as released imports `pyarrow.filesystem` and builds the legacy `pyarrow.parquet.ParquetDataset`
(`validate_schema=`, `.pieces`, `ParquetDatasetPiece`), all removed in pyarrow 15, and uses numpy aliases
removed in numpy 2; upstream is not maintained (uber/petastorm#805). On a runtime the package is installed by
`%pip` on the driver and by the cluster's library mechanism on the executors, so no install step may patch
files there. Instead `install()`, which importing `sparkml_par` (or `data_prep`) calls, puts a finder first
on `sys.meta_path`:

- the petastorm modules named in EDITS load from their installed source with the edits applied in memory,
  each edit counted as its module loads: a petastorm whose text differs (another version, a local change)
  fails to import with the file and the text named;
- `petastorm.pyarrow_compat` loads from `petastorm_pyarrow_compat.py` beside this module: the part of the
  legacy API petastorm uses, on `pyarrow.dataset`, `pyarrow.fs` and `ParquetFile`.

The driver, the executors and Spark's Python workers all import `sparkml_par` before petastorm (every
function they run is the project's), so the same petastorm runs everywhere. Where pyarrow < 15 and numpy < 2
(petastorm imports as released) nothing is installed. See ARCHITECTURE.md, "petastorm on pyarrow >= 15".
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
from pathlib import Path
from typing import Optional

PETASTORM_VERSION = "0.12.1"
COMPAT_SOURCE = Path(__file__).with_name("petastorm_pyarrow_compat.py")
COMPAT_MODULE = "petastorm.pyarrow_compat"

# Every module that builds the legacy ParquetDataset imports pyarrow.parquet as pq: the compat module gives the
# legacy names and passes every other pq.<name> (ParquetFile, read_metadata, write_metadata) to pyarrow.parquet.
_PQ = (
    "from pyarrow import parquet as pq\n",
    "from petastorm import pyarrow_compat as pq  # the legacy ParquetDataset, gone in pyarrow 15\n",
    1,
)
_LEGACY_DATASET_USERS = (
    "reader.py",
    "arrow_reader_worker.py",
    "py_dict_reader_worker.py",
    "etl/dataset_metadata.py",
    "etl/rowgroup_indexing.py",
    "etl/metadata_util.py",
    "etl/petastorm_generate_metadata.py",
)
# (file, old text, new text, occurrences of the old text), with why above each group.
EDITS: list[tuple[str, str, str, int]] = [
    *((name, *_PQ) for name in _LEGACY_DATASET_USERS),
    # pyarrow.filesystem (LocalFileSystem, pyarrow.localfs) is gone in pyarrow 15.
    (
        "utils.py",
        "from pyarrow.filesystem import LocalFileSystem\n",
        "from petastorm.pyarrow_compat import LocalFileSystem\n",
        1,
    ),
    (
        "spark/spark_dataset_converter.py",
        "from pyarrow import LocalFileSystem\n",
        "from petastorm.pyarrow_compat import LocalFileSystem\n",
        1,
    ),
    ("fs_utils.py", "pyarrow.localfs", "pyarrow_compat.localfs", 2),
    (
        "fs_utils.py",
        "from petastorm.hdfs.namenode import HdfsNamenodeResolver, HdfsConnector\n",
        "from petastorm import pyarrow_compat\n"
        "from petastorm.hdfs.namenode import HdfsNamenodeResolver, HdfsConnector\n",
        1,
    ),
    # pyarrow.hdfs is gone too; every reader imports hdfs/namenode.py (through fs_utils), so its import must not fail.
    (
        "hdfs/namenode.py",
        "from pyarrow.hdfs import HadoopFileSystem\n",
        "import pyarrow.fs\nfrom petastorm.pyarrow_compat import LegacyFileSystem as HadoopFileSystem\n",
        1,
    ),
    (
        "hdfs/namenode.py",
        "return pyarrow.hdfs.connect(hostname, url.port or 8020, **kwargs)",
        "return HadoopFileSystem(pyarrow.fs.HadoopFileSystem(hostname, url.port or 8020, **kwargs))",
        1,
    ),
    # numpy 2 removed np.string_, np.unicode_ and np.float; numpy 2.4 removed np.in1d.
    ("unischema.py", "np.string_", "np.bytes_", 3),
    ("unischema.py", "np.unicode_", "np.str_", 2),
    ("arrow_reader_worker.py", "np.unicode_", "np.str_", 1),
    ("tf_utils.py", "np.string_", "np.bytes_", 1),
    ("tf_utils.py", "(``np.unicode_`` or ``np.str_``)", "(``np.str_``)", 1),
    ("tf_utils.py", "np.unicode_", "np.str_", 3),
    ("weighted_sampling_reader.py", "dtype=np.float)", "dtype=np.float64)", 1),
    ("predicates.py", "np.in1d(", "np.isin(", 1),
    # pandas 3 refuses `df[mask] = None` on a bool column (pandas 2 made it object); the rows nulled here are
    # dropped a few lines later by the predicate's mask, so the assignments go.
    ("arrow_reader_worker.py", "        predicates_data_frame[erase_mask] = None\n", "", 1),
    ("arrow_reader_worker.py", "            other_data_frame[erase_mask] = None\n", "", 1),
    # pandas 3 deprecates merge(copy=...): copy-on-write is always on.
    ("arrow_reader_worker.py", "copy=False, left_index=True", "left_index=True", 1),
]


class PetastormEditError(ImportError):
    """The installed petastorm is not the text these edits were written for."""


def needs_compat() -> bool:
    """pyarrow >= 15 (the legacy API petastorm imports is gone) or numpy >= 2 (its aliases are)."""
    return _major("pyarrow") >= 15 or _major("numpy") >= 2


def _major(dist: str) -> int:
    return int(importlib.metadata.version(dist).split(".")[0])


def edit_source(name: str, text: str) -> str:
    """petastorm's `name` (a path inside the package) with its EDITS applied in order, each counted on the text
    the edits before it left."""
    errors = []
    for edit_name, old, new, count in EDITS:
        if edit_name != name:
            continue
        if text.count(old) != count:
            errors.append(f"{name}: {count} occurrence(s) of {old.strip()!r} expected, {text.count(old)} found")
        text = text.replace(old, new)
    if errors:
        raise PetastormEditError(
            f"petastorm {PETASTORM_VERSION} is needed on pyarrow >= 15 and numpy 2, and its text differs here:\n  "
            + "\n  ".join(errors)
            + f"\nfix: pip install --force-reinstall petastorm=={PETASTORM_VERSION}"
        )
    return text


class _EditedSourceLoader(importlib.machinery.SourceFileLoader):
    """Compiles a petastorm module from its installed source with the edits applied (never from its .pyc)."""

    def __init__(self, fullname: str, path: str, name: str):
        super().__init__(fullname, path)
        self.name = name

    def get_code(self, fullname):
        source = edit_source(self.name, Path(self.path).read_text(encoding="utf-8"))
        return compile(source, self.path, "exec", dont_inherit=True)


class PetastormFinder(importlib.abc.MetaPathFinder):
    """Serves the edited petastorm modules and `petastorm.pyarrow_compat`; every other import passes by."""

    modules = {"petastorm." + name[: -len(".py")].replace("/", "."): name for name, *_ in EDITS}

    def find_spec(self, fullname, path, target=None):
        if fullname == COMPAT_MODULE:
            return importlib.util.spec_from_file_location(fullname, COMPAT_SOURCE)
        name = self.modules.get(fullname)
        if name is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        spec.loader = _EditedSourceLoader(fullname, spec.origin, name)
        return spec


def install() -> Optional[PetastormFinder]:
    """Puts the finder first on sys.meta_path where this stack needs it (once); the finder, or None."""
    for finder in sys.meta_path:
        if isinstance(finder, PetastormFinder):
            return finder
    try:
        version = importlib.metadata.version("petastorm")
    except importlib.metadata.PackageNotFoundError:
        return None
    if version != PETASTORM_VERSION or not needs_compat():
        return None
    finder = PetastormFinder()
    sys.meta_path.insert(0, finder)
    return finder
