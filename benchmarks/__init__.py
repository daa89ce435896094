"""Benchmarks: scripts that print a table and write JSON to benchmarks/results/ (not timed tests)."""
