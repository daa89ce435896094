"""Every file the project writes goes through this package, complete or not at all.

- `store`: the project's own outputs at any URL pyarrow.fs opens (checkpoints, `metrics.jsonl`, the model
  artifact, the tuning study and its tables, the run directory, the report): `Store` reads, lists, writes
  one file whole; `publish_directory` replaces a directory whole; `WorkingCopy` is a local directory for
  writers that need one (sqlite, logging), pushed to its URL.
- `hadoop`: the outputs Spark writes (datasets, quarantine, predictions) and the files beside them, through
  the session's Hadoop FileSystem: staged in a sibling, renamed into place, leftovers of a killed run cleared.
- `local_files`: the local-disk primitives both use: a file written beside its name and renamed onto it, a
  directory renamed into place, a check that a directory can be written before the work starts.
"""
