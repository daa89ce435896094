"""Spark jobs that turn raw data into sharded petastorm datasets with a manifest."""
