"""Benchmark scripts; each writes JSON + Markdown under benchmarks/results/."""
