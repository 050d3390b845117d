"""FedSGT, S3T, SISA, FedCIO and the retrain baseline through the real ServerApp/ClientApp in process:
forget is exact at once, retrain rebuilds only what is invalid, and verify catches what saw the data."""

from __future__ import annotations

import pytest
from flwr.app import Context, RecordDict

from fedforget.inprocess import run_in_process
from fedforget.methods.chains import server as chains
from fedforget.methods.fedavg.client import ClientSite
from fedforget.store import Store
from fedforget.unlearning.forget import forget_request
from fedforget.unlearning.status import store_status
from fedforget.unlearning.verify import verify_store
from tests.integration.helpers import artifact_rows, copy_store, train_in_process

NODES = 3
FEDSGT = {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 2}


@pytest.fixture(scope="module")
def fedsgt_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("fedsgt") / "store"
    train_in_process(path, NODES, **FEDSGT)
    return path


def _retrain(store: Store) -> None:
    config = {**store.manifest()["config"], "store": str(store.root), "action": "retrain"}
    run_in_process(config, NODES)


def _first_sample(store: Store, partition: int, slice_: int = 0) -> int:
    return store.manifest()["partitions"][str(partition)][slice_][0]


def test_forget_is_exact_at_once_and_every_artifact_that_saw_the_sample_fails_verify(fedsgt_store, tmp_path):
    store = copy_store(fedsgt_store, tmp_path)
    before = artifact_rows(store)
    result = forget_request(store, samples=[_first_sample(store, 1)])
    assert result.invalidated and result.serving["available"]
    after = artifact_rows(store)
    assert {a: r["sha256"] for a, r in after.items()} == {a: r["sha256"] for a, r in before.items()}  # no training
    report = verify_store(store, include_all=True)
    assert report["exact"] and report["served"] > 0
    for row in report["compared"]:
        # negative control: every artifact whose lineage holds the sample differs from the scratch run
        assert row["equal"] == (row["artifact"] not in result.invalidated), row


def test_retrain_rebuilds_only_invalid_artifacts_and_clients_drop_the_data_for_good(fedsgt_store, tmp_path):
    store = copy_store(fedsgt_store, tmp_path)
    sample = _first_sample(store, 2)
    first = forget_request(store, slices=["0:1"])
    second = forget_request(store, samples=[sample])
    invalid = sorted(set(first.invalidated) | set(second.invalidated))
    untouched = {a: r["sha256"] for a, r in artifact_rows(store).items() if a not in invalid}
    _retrain(store)
    final = [m for m in store.metrics() if m.get("final")][-1]
    assert sorted(final["rebuilt"]) == invalid
    after = artifact_rows(store)
    assert all(r["valid"] for r in after.values())
    assert {a: after[a]["sha256"] for a in untouched} == untouched
    status = store_status(store, accuracy=False)
    assert status["requests"]["total"] == 2 and status["requests"]["pending"] == 0
    assert verify_store(store)["exact"]
    for partition, gone in ((0, store.manifest()["partitions"]["0"][1]), (2, [sample])):
        context = Context(run_id=0, node_id=0, node_config={"partition-id": partition, "num-partitions": NODES},
                          state=RecordDict(), run_config={**store.manifest()["config"], "store": str(store.root)})
        held = set(ClientSite.from_context(context).slice_examples(None).ids.tolist())
        assert held and not held & set(gone)  # every later run on this node trains without them


def test_truncating_a_sequence_equals_training_only_its_first_phases(fedsgt_store, tmp_path, monkeypatch):
    full = artifact_rows(Store.open(fedsgt_store))
    real_plan = chains.build_chain_plan

    def first_two_phases(cfg, run):  # noqa: ANN001, ANN202
        plan = real_plan(cfg, run)
        return type(plan)(plan.method, plan.groups, [[o[:2] for o in orders] for orders in plan.sequences],
                          plan.stacking, plan.placement, plan.rounds_per_phase, plan.serving)

    monkeypatch.setattr(chains, "build_chain_plan", first_two_phases)
    short = artifact_rows(train_in_process(tmp_path / "short", NODES, **FEDSGT))
    assert len(short) == 6 and set(short) < set(full)
    assert {a: r["sha256"] for a, r in short.items()} == {a: full[a]["sha256"] for a in short}


@pytest.mark.parametrize("overrides", [
    {"method": "s3t", "chains.groups": 2, "chains.shards": 2, "chains.budget": 2},
    {"method": "sisa", "chains.groups": 2, "chains.shards": 2},
    {"method": "fedcio", "chains.clusters": 2, "num-rounds": 2},
], ids=["s3t", "sisa", "fedcio"])
def test_each_sequence_sharded_method_forgets_and_retrains_exactly(tmp_path, overrides):
    store = train_in_process(tmp_path / "store", NODES, **{"slices-per-client": 2, **overrides})
    result = forget_request(store, samples=[_first_sample(store, 0)])
    assert result.invalidated
    if overrides["method"] == "s3t":
        metas = [a["meta"] for a in artifact_rows(store).values()]
        assert {tuple(m["targets"]) for m in metas} == {("fc2",), ("fc1",)}  # one layer block per phase
    report = verify_store(store, include_all=True)
    assert report["exact"] == result.serving["available"]
    assert all(row["equal"] == (row["artifact"] not in result.invalidated) for row in report["compared"])
    _retrain(store)
    after = verify_store(store)
    assert after["exact"] and after["served_equal"] == after["served"] > 0
    assert store_status(store, accuracy=False)["available"]


def test_fedavg_needs_a_retrain_after_any_forget_and_retrains_exactly(tmp_path):
    store = train_in_process(tmp_path / "store", NODES, **{"num-rounds": 2})
    forget_request(store, clients=[1])
    status = store_status(store, accuracy=False)
    assert status["retrain_required"] and not status["available"] and status["serving"] == []
    assert not verify_store(store)["exact"]
    _retrain(store)
    assert store_status(store, accuracy=False)["available"]
    assert verify_store(store)["exact"]


def test_s3t_layer_blocks_are_whole_layers_in_depth_order():
    from torch import nn

    from fedforget.methods.chains.plan import layer_blocks

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query, self.key, self.value = nn.Linear(2, 2), nn.Linear(2, 2), nn.Linear(2, 2)

    model = nn.Module()
    model.layer = nn.ModuleList([Attention() for _ in range(3)])
    names = chains.target_modules_in_depth_order(model, ["query", "value"])
    assert names == [f"layer.{i}.{t}" for i in range(3) for t in ("query", "value")]
    assert layer_blocks(names, 3) == [["layer.2.query", "layer.2.value"], ["layer.1.query", "layer.1.value"],
                                      ["layer.0.query", "layer.0.value"]]
