"""Shared test set-up: offline hubs, one machine-wide backbone cache."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FEDFORGET_CACHE", str(Path(__file__).resolve().parent.parent / ".cache"))
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")

from hypothesis import settings  # noqa: E402

# Every app and the coordinator import the methods' registry, which hands their declarations to the run config's
# parser and the store's ledger (fedforget.core.known_methods); tests that start from core do the same.
import fedforget.methods.registry  # noqa: E402,F401

# Property tests check behaviour, not speed: on a loaded 2-core machine one example can pass 200 ms.
settings.register_profile("fedforget", deadline=None)
settings.load_profile("fedforget")
