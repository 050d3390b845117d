"""FedSGT names frozen modules by sha256 and sends each node their bytes once: a run that hits the nodes'
module caches, one whose node loses its cache, and one whose cached files are corrupted all store the very
bytes of a run that sends everything in full, and the cached run sends fewer bytes down."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from flwr.app import Context, Message

from fedforget.client_app import app as client_app
from fedforget.federation.messaging import CHAIN_MESSAGE
from fedforget.inprocess import run_in_process
from fedforget.methods.chains.shipping import CACHE_ENV
from fedforget.store import Store
from fedforget.store.module_cache import CACHE_DIR

from .helpers import DIGITS, artifact_shas

NODES = 3
FEDSGT = {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 2}


def _train(store: Path, client=client_app) -> Store:  # noqa: ANN001
    run_in_process({**DIGITS, **FEDSGT, "store": str(store)}, NODES, client_app=client)
    return Store.open(store)


def _waves(store: Store) -> list[dict]:
    return [r for r in store.metrics() if "wave" in r]


def _cache_files(store: Store, partition: int) -> set[str]:
    return {f.stem for f in (store.root / "clients" / str(partition) / CACHE_DIR).glob("*.safetensors")}


def _before_chain_messages(store: Path, damage) -> object:  # noqa: ANN001
    """The real ClientApp, with ``damage(cache dir, partition)`` done to the node's cache before each chain message."""
    def app(msg: Message, context: Context) -> Message:
        if msg.metadata.message_type == CHAIN_MESSAGE:
            partition = int(context.node_config["partition-id"])
            damage(store / "clients" / str(partition) / CACHE_DIR, partition)
        return client_app(msg, context)
    return app


@pytest.fixture(scope="module")
def uncached(tmp_path_factory) -> Store:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, "off")
        return _train(tmp_path_factory.mktemp("uncached") / "store")


@pytest.fixture(scope="module")
def cached(tmp_path_factory) -> Store:
    return _train(tmp_path_factory.mktemp("cached") / "store")


def test_a_cached_run_stores_the_bytes_of_an_uncached_run_and_sends_each_module_once_per_node(uncached, cached):
    assert artifact_shas(cached) == artifact_shas(uncached)
    on, off = _waves(cached), _waves(uncached)
    assert sum(r["bytes-down"] for r in on) < sum(r["bytes-down"] for r in off)
    assert sum(r["modules-carried"] for r in off) == sum(r["modules-named"] for r in off) > 0
    named, carried = sum(r["modules-named"] for r in on), sum(r["modules-carried"] for r in on)
    assert carried < named, "no later position found a module in a node's cache"
    assert all(r["module-needs"] == 0 for r in on)
    stored = set(artifact_shas(cached).values())
    held = [_cache_files(cached, p) for p in range(NODES)]
    assert sum(len(h) for h in held) == carried  # each module travelled once to each node that needed it
    assert all(h <= stored for h in held)  # cache files are named by the artifacts' sha256
    assert not any(_cache_files(uncached, p) for p in range(NODES))


def test_a_node_that_loses_its_cache_asks_again_and_the_run_stores_the_same_bytes(uncached, tmp_path):
    store = tmp_path / "store"
    wiped = _before_chain_messages(store, lambda cache, p: shutil.rmtree(cache, ignore_errors=True) if p == 1 else None)
    fresh = _train(store, wiped)
    assert artifact_shas(fresh) == artifact_shas(uncached)
    assert sum(r["module-needs"] for r in _waves(fresh)) > 0


def test_a_corrupt_cached_module_is_asked_again_and_the_run_stores_the_same_bytes(uncached, tmp_path):
    def flip_a_byte(cache: Path, partition: int) -> None:
        for path in sorted(cache.glob("*.safetensors")):
            data = bytearray(path.read_bytes())
            data[-1] ^= 0x01
            path.write_bytes(bytes(data))

    store = tmp_path / "store"
    damaged = _train(store, _before_chain_messages(store, flip_a_byte))
    assert artifact_shas(damaged) == artifact_shas(uncached)
    assert sum(r["module-needs"] for r in _waves(damaged)) > 0
