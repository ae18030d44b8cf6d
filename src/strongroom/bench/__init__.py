"""Benchmarks that reproduce the seed documents' measurements beside peers (not run as tests)."""
