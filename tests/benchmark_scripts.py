"""A benchmark script imported by a test of its accounting (``benchmarks/`` is a folder of scripts, not a package)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@contextmanager
def benchmark_script(name: str) -> Iterator[ModuleType]:
    """``benchmarks/<name>.py`` as a module, with the folder on ``sys.path`` while it is used (its own imports)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))
