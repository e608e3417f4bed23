"""Benchmarks: each script writes JSON/CSV under benchmark/outputs/."""
