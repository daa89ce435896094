"""Legacy pyarrow API used by petastorm, reimplemented on pyarrow >= 15: loaded as `petastorm.pyarrow_compat` by
the import hook of sparkml_par.compat.petastorm_compat, and never imported by the project itself.

pyarrow 15 removed ``pyarrow.filesystem`` (``LocalFileSystem``, ``pyarrow.localfs``), ``pyarrow.hdfs`` and the
legacy ``pyarrow.parquet.ParquetDataset`` (``validate_schema=``, ``metadata_nthreads=``, ``.pieces``,
``.partitions``, ``.metadata``, ``.common_metadata``) together with ``ParquetDatasetPiece``. This module provides
just the parts of that API petastorm relies on, on top of ``pyarrow.fs``, ``pyarrow.dataset`` and
``pyarrow.parquet.ParquetFile``. Petastorm modules import it as ``pq``: every other attribute falls through to
``pyarrow.parquet``.
"""

import posixpath
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as _pq


def __getattr__(name):
    # ParquetFile, read_metadata, write_metadata, ... come from pyarrow.parquet unchanged.
    return getattr(_pq, name)


class LegacyFileSystem(object):
    """The ``pyarrow.filesystem.FileSystem`` methods petastorm calls, delegating to a ``pyarrow.fs`` filesystem."""

    def __init__(self, arrow_fs):
        self.arrow_fs = arrow_fs

    def to_arrow(self):
        # A public method (not just the attribute) so that hdfs.namenode.HAHdfsClient wraps it with failover.
        return self.arrow_fs

    def _type(self, path):
        return self.to_arrow().get_file_info(path).type

    def exists(self, path):
        return self._type(path) != pafs.FileType.NotFound

    def isdir(self, path):
        return self._type(path) == pafs.FileType.Directory

    def isfile(self, path):
        return self._type(path) == pafs.FileType.File

    def ls(self, path):
        return sorted(info.path for info in self.to_arrow().get_file_info(pafs.FileSelector(path)))

    def mkdir(self, path, create_parents=True):
        self.to_arrow().create_dir(path, recursive=create_parents)

    def rm(self, path, recursive=False):
        if self.isdir(path):
            if not recursive and self.ls(path):
                raise OSError("Directory not empty: {}".format(path))
            self.to_arrow().delete_dir(path)
        else:
            self.to_arrow().delete_file(path)

    delete = rm

    def open(self, path, mode="rb"):
        if "r" in mode:
            return self.to_arrow().open_input_file(path)
        if "a" in mode:
            return self.to_arrow().open_append_stream(path)
        return self.to_arrow().open_output_stream(path)


class LocalFileSystem(LegacyFileSystem):
    """Replaces ``pyarrow.filesystem.LocalFileSystem`` (``isinstance`` checks) and ``pyarrow.localfs``."""

    def __init__(self, arrow_fs=None):
        super(LocalFileSystem, self).__init__(arrow_fs or pafs.LocalFileSystem())


localfs = LocalFileSystem()


def _normalize_filesystem(filesystem):
    """Returns (object with legacy ``open``/``exists``/..., pyarrow.fs.FileSystem) for any filesystem petastorm
    may be given: None (local), a LegacyFileSystem, a pyarrow.fs.FileSystem or an fsspec filesystem."""
    if filesystem is None:
        return localfs, localfs.to_arrow()
    if isinstance(filesystem, LegacyFileSystem):
        return filesystem, filesystem.to_arrow()
    if isinstance(filesystem, pafs.FileSystem):
        if isinstance(filesystem, pafs.LocalFileSystem):
            return LocalFileSystem(filesystem), filesystem
        return LegacyFileSystem(filesystem), filesystem
    # fsspec filesystems (s3fs, gcsfs, ...) already have open/exists/rm
    return filesystem, pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))


class PartitionSet(object):
    """One hive partition level: ``name``, its ``keys`` (directory values) and their typed ``dictionary``."""

    def __init__(self, name, keys):
        self.name = name
        self.keys = keys

    @cached_property
    def dictionary(self):
        # Legacy rule: int64 when every key parses as an integer, otherwise string.
        try:
            return pa.array([int(k) for k in self.keys], type=pa.int64())
        except ValueError:
            return pa.array(self.keys, type=pa.string())


class ParquetPartitions(object):
    def __init__(self, levels):
        self.levels = levels
        self.partition_names = set(level.name for level in levels)

    def __len__(self):
        return len(self.levels)

    def __getitem__(self, i):
        return self.levels[i]

    def __iter__(self):
        return iter(self.levels)


class ParquetDatasetPiece(object):
    """A parquet file, or one row group of it (``row_group``), with its hive ``partition_keys``:
    a list of ``(partition name, index into ParquetPartitions[level].keys)``."""

    def __init__(self, path, open_file_func=None, file_options=None, row_group=None, partition_keys=None):
        self.path = path
        self.open_file_func = open_file_func or localfs.open
        self.row_group = row_group
        self.partition_keys = partition_keys or []

    def __repr__(self):
        return "ParquetDatasetPiece({!r}, row_group={!r}, partition_keys={!r})".format(
            self.path, self.row_group, self.partition_keys
        )

    def get_metadata(self, open_file_func=None):
        with (open_file_func or self.open_file_func)(self.path) as f:
            return _pq.ParquetFile(f).metadata

    def read(self, columns=None, use_threads=True, partitions=None, file=None, use_pandas_metadata=False):
        columns = list(columns) if columns is not None else None
        with self.open_file_func(self.path) as f:
            reader = _pq.ParquetFile(f)
            if self.row_group is not None:
                table = reader.read_row_group(
                    self.row_group, columns=columns, use_threads=use_threads, use_pandas_metadata=use_pandas_metadata
                )
            else:
                table = reader.read(columns=columns, use_threads=use_threads, use_pandas_metadata=use_pandas_metadata)
        # As the legacy reader: partition values are appended as constant dictionary-encoded columns.
        if self.partition_keys:
            if partitions is None:
                raise ValueError("Must pass partition sets")
            for level, (name, index) in enumerate(self.partition_keys):
                indices = pa.array(np.full(len(table), index, dtype="i4"))
                table = table.append_column(
                    name, pa.DictionaryArray.from_arrays(indices, partitions.levels[level].dictionary)
                )
        return table


class ParquetDataset(object):
    """The legacy ``pyarrow.parquet.ParquetDataset`` surface petastorm uses: ``paths``, ``fs``, ``pieces``
    (one per file, sorted by path), ``partitions`` (hive ``key=value`` directories, or None), ``metadata`` /
    ``metadata_path`` (``_metadata``) and ``common_metadata`` / ``common_metadata_path`` (``_common_metadata``).
    ``filters`` (DNF tuples) prune files by partition values only, as the legacy implementation did.
    Legacy-only keyword arguments (``validate_schema``, ``metadata_nthreads``, ...) are accepted and ignored."""

    def __init__(self, path_or_paths, filesystem=None, filters=None, **_legacy_kwargs):
        self.paths = path_or_paths
        self.fs, self._arrow_fs = _normalize_filesystem(filesystem)
        self.metadata_path = self.common_metadata_path = None
        self.partitions = None
        if isinstance(path_or_paths, str) and self.fs.isdir(path_or_paths):
            base = path_or_paths.rstrip("/") or "/"
            for name in ("_metadata", "_common_metadata"):
                if self.fs.exists(posixpath.join(base, name)):
                    setattr(self, name.lstrip("_") + "_path", posixpath.join(base, name))
            # Discovery skips files and directories starting with '.' or '_' (_SUCCESS, .crc, _metadata, ...)
            dataset = ds.dataset(base, filesystem=self._arrow_fs, format="parquet", partitioning="hive")
            fragments = dataset.get_fragments(filter=_pq.filters_to_expression(filters) if filters else None)
            paths = sorted(fragment.path for fragment in fragments)
            parts = [[seg.split("=", 1) for seg in posixpath.relpath(p, base).split("/")[:-1]] for p in paths]
            if any(parts):
                names = [name for name, _ in parts[0]]
                levels = [PartitionSet(name, sorted(set(p[i][1] for p in parts))) for i, name in enumerate(names)]
                self.partitions = ParquetPartitions(levels)
                keys = [[(name, levels[i].keys.index(value)) for i, (name, value) in enumerate(p)] for p in parts]
            else:
                keys = [None] * len(paths)
            self.pieces = [ParquetDatasetPiece(p, self.fs.open, partition_keys=k) for p, k in zip(paths, keys)]
        else:
            paths = path_or_paths if isinstance(path_or_paths, list) else [path_or_paths]
            for path in paths:
                if not self.fs.isfile(path):
                    raise OSError("Passed non-file path: {}".format(path))
            self.pieces = [ParquetDatasetPiece(p, self.fs.open) for p in paths]

    def _read_metadata(self, path):
        if path is None:
            return None
        with self.fs.open(path) as f:
            return _pq.read_metadata(f)

    @cached_property
    def metadata(self):
        return self._read_metadata(self.metadata_path)

    @cached_property
    def common_metadata(self):
        return self._read_metadata(self.common_metadata_path)
