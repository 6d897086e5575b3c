"""Benchmarks run as commands (figures are measured and reported, never asserted by tests)."""
