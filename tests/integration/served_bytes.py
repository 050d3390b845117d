"""The served bytes, pinned: what a store serves after training and after forget + retrain, per fixed config,
as the sha256 of every served file, recorded in ``served_sha256.json`` per platform (bits are exact per
machine, interpreter, torch build and CPU vector units). ``FEDFORGET_RECORD_SERVED_BYTES=1`` records them anew,
on purpose; the diff shows which pinned run moved."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
from pathlib import Path
from typing import Any

import pytest

from fedforget.store import Store

from .helpers import artifact_shas, copy_store

SERVED_BYTES = Path(__file__).with_name("served_sha256.json")
#: CPU features that pick torch's kernels (and so the last bits of a float): the same interpreter and torch
#: build give other bytes on a CPU with other vector units
ISA_FLAGS = re.compile(r"^(avx|amx|fma|f16c|sse|ssse)")


def served_shas(root: Path) -> dict[str, str]:
    """What the store serves: each served artifact id → the sha256 of its file."""
    store = Store.open(root)
    shas = artifact_shas(store)
    ledger = store.ledger()
    try:
        return {artifact: shas[artifact] for artifact in sorted(ledger.serving()["artifacts"])}
    finally:
        ledger.close()


def bytes_platform() -> str:
    """Bits are exact per platform: the machine, the interpreter, the torch build and the CPU's vector units."""
    import torch

    flags: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("flags"):
                flags = {f for f in line.split(":", 1)[1].split() if ISA_FLAGS.match(f)}
                break
    isa = hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:12]
    return (f"{platform.machine()} python {platform.python_version()} torch {torch.__version__} "
            f"cpu {torch.backends.cpu.get_cpu_capability()} isa {isa}")


def recorded_bytes() -> dict:
    """``{"configs": {name: config}, "platforms": {platform: {name: {"trained": ..., "retrained": ...}}}}``."""
    return json.loads(SERVED_BYTES.read_text(encoding="utf-8")) if SERVED_BYTES.is_file() else {}


def recording() -> bool:
    return os.environ.get("FEDFORGET_RECORD_SERVED_BYTES") == "1"


def assert_serves_recorded_bytes(name: str, config: dict[str, Any], trained: Path, retrained: Path | None) -> None:
    """``trained`` (and ``retrained``, after forget + retrain, where the run has one) serve the bytes recorded
    for ``name`` under ``config`` on this platform; skips where this platform has none recorded."""
    now = {"trained": served_shas(trained)}
    if retrained is not None:
        now["retrained"] = served_shas(retrained)
    recorded = recorded_bytes()
    here = bytes_platform()
    if recording():
        platforms = recorded.get("platforms", {})
        platforms[here] = {**platforms.get(here, {}), name: now}
        recorded = {"configs": {**recorded.get("configs", {}), name: config}, "platforms": platforms}
        SERVED_BYTES.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        pytest.skip(f"recorded the served bytes of {name}")
    if name not in recorded["platforms"].get(here, {}):
        where = sorted(p for p, names in recorded["platforms"].items() if name in names)
        pytest.skip(f"served bytes of {name} recorded on {where}, this is {here}")
    assert recorded["configs"][name] == config, f"the recorded config of {name} changed: record anew on purpose"
    assert now == recorded["platforms"][here][name]


def assert_changed_served_byte_is_caught(name: str, trained: Path, parent: Path) -> None:
    """Negative control: the pinned comparison fails once one served file of ``trained`` holds other bytes."""
    if recording():
        return
    store = copy_store(trained, parent, "changed-byte")
    ledger = store.ledger()
    try:
        artifact = ledger.serving()["artifacts"][0]
        ledger.db.execute("UPDATE artifacts SET sha256=? WHERE artifact=?", ("0" * 64, artifact))
    finally:
        ledger.close()
    pinned = [p[name]["trained"] for p in recorded_bytes()["platforms"].values() if name in p]
    assert pinned, f"no served bytes recorded for {name}"
    for platform_bytes in pinned:
        assert served_shas(store.root) != platform_bytes
