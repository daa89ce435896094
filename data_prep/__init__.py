"""Spark jobs that turn raw data into sharded petastorm datasets with a manifest."""

# Its modules import petastorm: sparkml_par first makes petastorm importable on pyarrow >= 15 and numpy 2.
import sparkml_par  # noqa: F401
