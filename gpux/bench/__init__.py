"""Measurement: the benchmark protocol (runtime-independent), `run --benchmark`, and `gpux tune`."""
