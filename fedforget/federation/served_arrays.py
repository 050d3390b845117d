"""What a store serves as Flower's ArrayRecord: ``Result.arrays``, and what an overridden ``configure_evaluate``
is handed."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord

from fedforget.store.store import Store


def served_arrays(store: Store) -> ArrayRecord:
    """What the store serves, as one ArrayRecord: one served artifact's tensors under their own names;
    several (an ensemble) under ``<artifact id>:<tensor>``. Empty when nothing is served."""
    ledger = store.ledger()
    try:
        served = list(ledger.serving().get("artifacts") or [])
        shas = {a["artifact"]: a["sha256"] for a in ledger.artifacts()}
    finally:
        ledger.close()
    record = ArrayRecord()
    for artifact in served:
        for name, value in store.get_arrays(shas[artifact]).items():
            record[name if len(served) == 1 else f"{artifact}:{name}"] = Array(np.ascontiguousarray(value))
    return record
