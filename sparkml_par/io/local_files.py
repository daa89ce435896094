"""Local files and directories that appear complete or not at all: written beside, then renamed into place.

For what the project writes with plain file I/O (reports, plots, tables, metrics, run state, the model
artifact); Hadoop-filesystem outputs have their own staging in `hadoop`. A rename within one directory
is atomic on a local or mounted POSIX filesystem, so a reader (or a run killed mid-write) sees the old
file or the new one, never half of either.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path
from typing import Iterator

from sparkml_par.errors import SparkmlParError


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A hidden sibling to write instead of `path`, renamed onto it when the block ends, removed on an error.

    The sibling keeps path's suffix, so writers that pick a format by the name (matplotlib) still do.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = _temp_sibling(path, uuid.uuid4().hex[:8])
    try:
        yield temp
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def remove_leftovers(path: Path) -> None:
    """Deletes the hidden siblings `atomic_path` made for `path` that a killed writer never renamed.

    Only for a path one process writes at a time (a run directory's state): another writer's sibling
    would go too.
    """
    for temp in path.parent.glob(_temp_sibling(path, "*").name):
        temp.unlink(missing_ok=True)


def _temp_sibling(path: Path, tag: str) -> Path:
    return path.with_name(f".{path.stem}.tmp-{tag}{path.suffix}")


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as temp:
        temp.write_text(text)


def replace_directory(staging: Path, target: Path) -> None:
    """Renames a finished staging directory onto target. An existing target is moved aside first and put
    back if the rename fails, and deleted only once the new one is in place."""
    retired = None
    if target.exists():
        retired = target.with_name(f".{target.name}-old-{uuid.uuid4().hex[:8]}")
        os.replace(target, retired)
    try:
        os.replace(staging, target)
    except BaseException:
        if retired is not None:
            os.replace(retired, target)
        raise
    if retired is not None:
        shutil.rmtree(retired, ignore_errors=True)


def check_writable_directory(directory: Path, setting: str) -> None:
    """Proves that a local output directory can be created and written, without creating it: a file is made
    and removed in the directory or its nearest existing parent, so a bad output fails before the work and
    a refused run leaves nothing behind."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(f"{existing} is a file")
        probe = existing / f".writable-check-{uuid.uuid4().hex[:12]}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        inside = f" (in {existing})" if existing != directory else ""
        reason = (
            f"{existing} is a file, not a directory"
            if isinstance(exc, NotADirectoryError)
            else exc.strerror or str(exc)
        )
        raise SparkmlParError(
            f"cannot write to {setting} {str(directory)!r}{inside}: {reason}; "
            f"set {setting} to a place you can create files in"
        ) from None
