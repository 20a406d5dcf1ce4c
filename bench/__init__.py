"""Benchmarks for the performance targets in the issues; see docs/benchmarks.md."""
