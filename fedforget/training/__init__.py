"""Deterministic local loops: supervised training and evaluation (DESIGN §4)."""
