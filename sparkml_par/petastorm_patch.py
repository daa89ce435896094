"""`python -m sparkml_par.petastorm_patch`: makes the installed petastorm 0.12.1 run on pyarrow >= 15 and numpy 2.

petastorm as released imports `pyarrow.filesystem` and builds the legacy `pyarrow.parquet.ParquetDataset`
(`validate_schema=`, `.pieces`, `ParquetDatasetPiece`), all removed in pyarrow 15, and uses numpy aliases
removed in numpy 2; upstream is not maintained (uber/petastorm#805). The patch, applied at install time
(`make setup` runs it) as the Horovod build patches Horovod's sources:

- copies `petastorm_pyarrow_compat.py` (beside this module) into petastorm as `petastorm/pyarrow_compat.py`:
  the part of the legacy API petastorm uses, on `pyarrow.dataset`, `pyarrow.fs` and `ParquetFile`;
- edits petastorm's modules at the exact texts in EDITS, each counted before anything is written: a petastorm
  whose text differs (another version, a local change) is refused with the file and the text named;
- marks each patched file, so a second run only verifies.

On pyarrow < 15 (the pinned stack) petastorm runs as released and nothing is patched. Proven by petastorm's
own reader tests (end to end, Parquet reader, PyTorch loaders, Unischema, metadata) run against the patched
copy; see ARCHITECTURE.md "petastorm on pyarrow >= 15".
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path

PETASTORM_VERSION = "0.12.1"
MARKER = "# patched by sparkml_par.petastorm_patch for pyarrow >= 15 and numpy 2"
COMPAT_SOURCE = Path(__file__).with_name("petastorm_pyarrow_compat.py")
COMPAT_MODULE = "pyarrow_compat.py"

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


class PatchError(Exception):
    """The installed petastorm is not the one these edits were written for."""


def needs_patch() -> bool:
    """pyarrow >= 15: the legacy API petastorm imports is gone."""
    return int(importlib.metadata.version("pyarrow").split(".")[0]) >= 15


def installed_package() -> Path:
    """petastorm's package directory, found without importing it (importing fails before the patch)."""
    spec = importlib.util.find_spec("petastorm")
    if spec is None or not spec.submodule_search_locations:
        raise PatchError("petastorm is not installed: `pip install petastorm==0.12.1`")
    return Path(spec.submodule_search_locations[0])


def patch(package: Path) -> list[str]:
    """Patches the petastorm package at `package`; the files written (none when it was patched already)."""
    version = re.search(r"__version__ = '([^']+)'", (package / "__init__.py").read_text())
    if version is None or version.group(1) != PETASTORM_VERSION:
        found = version.group(1) if version else "of unknown version"
        raise PatchError(f"petastorm {found} at {package}: the patch is written for {PETASTORM_VERSION} only")
    planned, errors = {}, []
    for name in dict.fromkeys(name for name, *_ in EDITS):
        text = (package / name).read_text()
        edits = [edit for edit in EDITS if edit[0] == name]
        if MARKER in text:
            errors += [
                f"{name}: marked as patched but lacks {new.strip()!r}" for _, _, new, _ in edits if new not in text
            ]
            continue
        for _, old, new, count in edits:
            if text.count(old) != count:
                errors.append(f"{name}: {count} occurrence(s) of {old.strip()!r} expected, {text.count(old)} found")
            text = text.replace(old, new)
        planned[name] = f"{text.rstrip()}\n\n{MARKER}\n"
    if errors:
        raise PatchError(f"petastorm at {package} was not patched, its text differs:\n  " + "\n  ".join(errors))
    compat = COMPAT_SOURCE.read_text()
    if not (package / COMPAT_MODULE).is_file() or (package / COMPAT_MODULE).read_text() != compat:
        planned[COMPAT_MODULE] = compat
    for name, text in planned.items():
        (package / name).write_text(text)
    _record(package, COMPAT_MODULE)
    return sorted(planned)


def _record(package: Path, name: str) -> None:
    """Lists the added module in the wheel's RECORD, so that `pip uninstall petastorm` removes it too."""
    for record in package.parent.glob(f"petastorm-{PETASTORM_VERSION}.dist-info/RECORD"):
        line = f"petastorm/{name},,\n"
        if line not in record.read_text():
            with record.open("a") as out:
                out.write(line)


def main() -> int:
    if not needs_patch():
        print(f"petastorm_patch: pyarrow {importlib.metadata.version('pyarrow')} has the legacy API: nothing to patch")
        return 0
    try:
        package = installed_package()
        written = patch(package)
    except PatchError as exc:
        print(f"petastorm_patch: {exc}", file=sys.stderr)
        return 1
    state = f"patched {', '.join(written)}" if written else "already patched, verified"
    print(f"petastorm_patch: petastorm {PETASTORM_VERSION} at {package}: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
