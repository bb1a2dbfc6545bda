"""Benchmarks: side-by-side measurements, results committed under bench/results/."""
