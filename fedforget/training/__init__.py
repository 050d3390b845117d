"""Deterministic local loops: supervised training and evaluation."""
