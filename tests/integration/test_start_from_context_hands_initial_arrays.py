"""``start_from_context(strategy, grid, context, initial_arrays=...)`` hands the arrays to ``start``: a user's app
that passes them trains from them (the store records them), a retrain through the same app (handing them again)
is accepted, and ``fedforget verify`` in process, running that app, is exact. Its reference starts from the
arrays the store recorded: the app may stop handing them and verify stays exact (negative control: a reference
that started from the arrays the app hands now, none, is not exact); an app that now hands other arrays is
refused in one line."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest
from flwr.serverapp.strategy import FedAvg

from fedforget.core.config import ConfigError
from fedforget.federation.run_setup import build_model
from fedforget.inprocess import run_in_process
from fedforget.methods.replay.strategy import Forgettable
from fedforget.store import Store
from fedforget.store.initial_arrays import INITIAL_ARRAYS
from fedforget.unlearning.forget import forget_request
from fedforget.unlearning.verify import verify_store

from .app_folder import KEYS, NODES, server_app, write_app, write_initial
from .helpers import served_ids

MODULE = "clipped_initial_app"
DIGIT_CLASSES = 10


def _initial_arrays(shift: float) -> dict[str, np.ndarray]:
    """The seeded start's tensors, their values moved: a model of the user's own."""
    seeded = build_model(Forgettable(FedAvg(), **KEYS).config, DIGIT_CLASSES).initial_state
    rng = np.random.default_rng(7)
    return {name: (t.numpy() + rng.normal(0, shift, t.shape)).astype(t.numpy().dtype) for name, t in seeded.items()}


def test_an_app_handing_initial_arrays_trains_from_them_and_retrains_and_verifies_exactly(tmp_path, monkeypatch):
    folder = write_app(tmp_path / "app", MODULE)
    initial = _initial_arrays(0.05)
    write_initial(folder, initial)
    path = tmp_path / "store"
    run_in_process({"store": str(path), "action": "train"}, NODES, server_app=server_app(folder, MODULE))
    store = Store.open(path)
    recorded = store.get_arrays(store.manifest()[INITIAL_ARRAYS])
    assert set(recorded) == set(initial) and all(np.array_equal(recorded[k], initial[k]) for k in initial)

    forget_request(store, samples=[store.manifest()["partitions"]["0"][0][0]])
    config = {**store.manifest()["config"], "store": str(path), "action": "retrain"}
    run_in_process(config, NODES, server_app=server_app(folder, MODULE))  # handed the same arrays again
    assert served_ids(store)
    report = verify_store(Store.open(path))
    assert report["exact"] is True, report["reason"]

    (folder / "initial.npz").unlink()  # the app hands none now: the reference starts from the recorded ones
    assert verify_store(Store.open(path))["exact"] is True
    with monkeypatch.context() as patched:  # a reference from what the app hands (the seeded start) is not exact
        patched.setattr("fedforget.federation.starting_model.reference_of", lambda *_: nullcontext())
        assert verify_store(Store.open(path))["exact"] is False

    write_initial(folder, _initial_arrays(0.5))  # the app now hands other arrays
    with pytest.raises(ConfigError, match="initial_arrays differ from those the store being verified was trained "
                                          "from") as refused:
        verify_store(Store.open(path))
    assert "\n" not in str(refused.value)
