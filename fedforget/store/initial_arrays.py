"""The arrays a store's training started from, when its run was handed some (``start(initial_arrays=...)``).

They are kept as an artifact file, their sha256 under the manifest's ``initial-arrays``, so that every later run
of the store (a retrain, ``fedforget verify``'s from-scratch reference) starts from the same bytes without
being handed them again. They come from the caller, not from any node's data: no forget invalidates them and
no purge deletes them.
"""

from __future__ import annotations

import json

import numpy as np

from fedforget.store.store import METADATA_KEY, Store, StoreError, safetensors_metadata

#: the manifest field holding the sha256 of the initial arrays' file (absent: the run started from the seed)
INITIAL_ARRAYS = "initial-arrays"
#: what the file's safetensors header says it is (never an artifact of the ledger)
KIND = "initial-arrays"


def record_initial_arrays(store: Store, arrays: dict[str, np.ndarray], task: str) -> str:
    """Write the initial arrays as a file of the store; its sha256 (the caller puts it in the manifest)."""
    return store.put_arrays(arrays, {"kind": KIND, "task": task})


def recorded_sha(manifest: dict[str, object]) -> str | None:
    """The sha256 of the initial arrays the store's training started from (None: it started from the seed)."""
    sha = manifest.get(INITIAL_ARRAYS)
    return str(sha) if sha else None


def recorded_initial_arrays(store: Store) -> dict[str, np.ndarray] | None:
    """The initial arrays the store's training started from, read back (None: it started from the seed)."""
    sha = recorded_sha(store.manifest())
    if sha is None:
        return None
    try:
        return store.get_arrays(sha)
    except StoreError as exc:
        raise StoreError(f"the initial arrays the store was trained from are unusable: {exc}; restore the store "
                         "from a backup") from None


def initial_arrays_problem(store: Store, manifest: dict[str, object]) -> str | None:
    """What is wrong with the recorded initial arrays' file (None: absent from the manifest, or intact)."""
    sha = manifest.get(INITIAL_ARRAYS)
    if sha is None:
        return None
    if not isinstance(sha, str) or not store.verify_artifact(sha):
        return (f"the stored initial arrays {str(sha)[:16]}… are corrupt or missing (their bytes no longer match "
                "the sha256 recorded when training wrote them)")
    meta = safetensors_metadata(store.artifact_path(sha)) or {}
    try:
        kind = json.loads(meta.get(METADATA_KEY, "{}")).get("kind")
    except (ValueError, AttributeError):
        kind = None
    if kind != KIND:
        return f"the manifest's initial arrays {sha[:16]}… are not an initial-arrays file"
    return None
