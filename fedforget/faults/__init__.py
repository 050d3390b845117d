"""Fault injection for the crash-safety tests and benchmarks."""
