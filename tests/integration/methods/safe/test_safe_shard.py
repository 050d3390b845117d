"""SAFE's server-held safe shard through the real ServerApp/ClientApp in process: every clique also learns
from it, its rows are outside every client's data, a forget request retrains one clique with the safe
shard taking part again and verify stays bit-exact, and a safe-shard id can never be forgotten."""

from __future__ import annotations

import hashlib
import json

import pytest
from typer.testing import CliRunner

from fedforget.core.config import ConfigError
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.ledger import LedgerUsageError
from fedforget.unlearning.cli import app
from fedforget.unlearning.forget import forget_request
from fedforget.unlearning.verify import verify_store
from tests.integration.helpers import artifact_shas, copy_store, served_ids, train_in_process

NODES = 3
SAFE = {"method": "safe", "safe.coarse": 2, "safe.fine": 2, "num-rounds": 2, "safe.adapter-steps": 6, "train-size": 800}
SHARD = 200


@pytest.fixture(scope="module")
def shard_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("safe-shard") / "store"
    train_in_process(path, NODES, **SAFE, **{"safe.shard": SHARD})
    return path


def _retrain(store: Store) -> dict:
    run_in_process({**store.manifest()["config"], "store": str(store.root), "action": "retrain"}, NODES)
    return [m for m in store.metrics() if m.get("final")][-1]


def _partition_ids(store: Store) -> set[int]:
    return {int(i) for slices in store.manifest()["partitions"].values() for ids in slices for i in ids}


def _cliques(ids: list[str]) -> list[str]:
    return [a for a in ids if "/proto/" not in a]


def test_the_safe_shard_changes_every_served_adapter_and_is_disjoint_from_every_partition(shard_store, tmp_path):
    from fedforget.methods.safe.shard import whole_train_split
    from fedforget.unlearning.evaluate import stored_config

    store = Store.open(shard_store)
    plain = train_in_process(tmp_path / "plain", NODES, **SAFE)
    ids = store.manifest()["safe-shard-ids"]
    assert len(ids) == len(set(ids)) == SHARD and ids == sorted(ids)
    assert not set(ids) & _partition_ids(store)  # no client holds a safe-shard sample
    whole = set(whole_train_split(stored_config(store)).ids.tolist())
    assert set(ids) <= whole - _partition_ids(plain)  # rows of the training split the run does not use
    plan = store.manifest()["plan"]
    assert sum(plan["safe-shard"].values()) == SHARD
    ours, theirs = artifact_shas(store), artifact_shas(plain)
    cliques = _cliques(served_ids(store))
    assert cliques and cliques == _cliques(served_ids(plain))
    assert all(ours[c] != theirs[c] for c in cliques)  # every clique also learned from the safe shard
    cells = [a for a in ours if "/proto/p" in a]
    assert all(ours[c] == theirs[c] for c in cells)  # the clients' prototype sums are untouched
    shard_protos = [a for a in served_ids(store) if "/proto/safe-shard/" in a]
    assert len(shard_protos) == len(plan["safe-shard"])  # one per class the safe shard holds, served
    final = [m for m in store.metrics() if m.get("final")][-1]
    assert final["safe-shard-visited"] > 0


def test_forgetting_a_client_sample_retrains_one_clique_with_the_safe_shard_and_verify_is_exact(shard_store, tmp_path):
    store = copy_store(shard_store, tmp_path)
    before = artifact_shas(store)
    sample = store.manifest()["partitions"]["1"][0][0]
    result = forget_request(store, samples=[sample])
    cliques = _cliques(result.invalidated)
    assert len(cliques) == 1
    assert not any("safe-shard" in a for a in result.invalidated)  # the server's data is never invalidated
    done = _retrain(store)
    assert done["rebuilt"] == cliques and done["safe-shard-visited"] > 0  # the safe shard took part again
    after = artifact_shas(store)
    assert {a for a in after if after[a] != before[a]} == set(result.invalidated)
    report = verify_store(store, include_all=True)
    assert report["exact"], report["reason"]
    assert report["safe_shard"] == {"equal": True, "size": SHARD, "scratch_size": SHARD}


def test_verify_reports_a_mismatch_when_the_recorded_safe_shard_was_changed(shard_store, tmp_path):
    from fedforget.methods.safe.shard import whole_train_split
    from fedforget.unlearning.evaluate import stored_config

    store = copy_store(shard_store, tmp_path)
    sample = store.manifest()["partitions"]["0"][0][0]
    clique = _cliques(forget_request(store, samples=[sample]).invalidated)[0]
    g, f = (int(x[1:]) for x in clique.split("/")[1:])
    classes = set(store.manifest()["plan"]["classes"][g][f])
    whole = whole_train_split(stored_config(store))
    label = dict(zip(whole.ids.tolist(), whole.labels.tolist(), strict=True))
    ids = store.manifest()["safe-shard-ids"]
    out = next(i for i in ids if label[i] in classes)  # a row the retrained clique reads ...
    into = next(i for i in sorted(label) if label[i] == label[out] and i not in set(ids) | _partition_ids(store))
    store.update_manifest(**{"safe-shard-ids": sorted([*(i for i in ids if i != out), into])})  # ... swapped
    _retrain(store)  # trains on the recorded (tampered) rows
    report = verify_store(store)
    assert not report["exact"] and "safe shard" in report["reason"]
    row = next(r for r in report["compared"] if r["artifact"] == clique)
    assert not row["equal"]  # the retrained clique read other safe-shard rows than SAFE from scratch


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"safe.shard": 700}, r"only 637 of the task's 1437 are free; lower 'safe.shard' to at most 637 or "
                              r"'train-size' to at most 737"),
        ({"safe.shard": 1, "train-size": 0}, r"only 0 of the task's 1437 are free.*'train-size' to at most 1436"),
        ({"safe.shard": -1}, r"'safe.shard' must be in 0\.\."),
        ({"safe.shard": 10, "method": "fedavg"}, r"does not apply to method 'fedavg'"),
        ({"safe.shard": 10, "safe.dp": True}, r"not supported with safe.dp=true"),
    ],
)
def test_a_bad_safe_shard_is_a_one_line_config_error_and_writes_nothing(tmp_path, override, message):
    from fedforget.unlearning.run_config import check_run_config

    with pytest.raises(ConfigError, match=message) as exc:
        train_in_process(tmp_path / "s", NODES, **{**SAFE, **override})
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "s").exists()
    text = " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={str(v).lower()}"
                    for k, v in {**SAFE, "task": "digits-mlp", **override}.items())
    with pytest.raises(ConfigError, match=message):  # `fedforget run` refuses it before starting Flower
        check_run_config(text)


def test_forgetting_a_safe_shard_id_is_refused_and_the_store_is_unchanged(shard_store, tmp_path):
    store = copy_store(shard_store, tmp_path)
    shard_id = store.manifest()["safe-shard-ids"][0]
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(store.root.iterdir()) if p.is_file()}
    with pytest.raises(LedgerUsageError, match="server-held safe shard"):
        forget_request(store, samples=[shard_id])
    result = CliRunner().invoke(app, ["forget", "--store", str(store.root), "--sample", str(shard_id)])
    assert result.exit_code == 2 and "never receives forget requests" in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(store.root.iterdir()) if p.is_file()}
    assert after == files
    status = CliRunner().invoke(app, ["status", "--store", str(store.root), "--json"])
    assert status.exit_code == 0 and json.loads(status.output)["safe_shard"] == SHARD


def test_protosisa_shards_all_read_the_whole_safe_shard_and_verify_is_exact(tmp_path):
    store = train_in_process(tmp_path / "store", NODES, **{**SAFE, "method": "protosisa", "num-rounds": 1,
                                                           "safe.shard": 50})
    final = [m for m in store.metrics() if m.get("final")][-1]
    budget = store.manifest()["adapter-budget"]
    shards = len(_cliques(final["served"]))  # every shard holds every class, so each reads all 50 rows
    assert final["safe-shard-visited"] == shards * budget["steps"] * min(budget["batch-size"], 50)
    assert verify_store(store)["exact"]


def test_a_safe_graph_with_one_class_cliques_is_a_one_line_config_error_and_writes_nothing(tmp_path):
    """digits-mlp has 10 classes: safe.fine=6 leaves some cliques one class, so no adapter of theirs sees a negative."""
    from fedforget.unlearning.run_config import check_run_config

    message = r"safe\.fine=6 leaves a SAFE clique with one class of digits-mlp's 10.*use safe\.fine <= 5"
    with pytest.raises(ConfigError, match=message) as exc:
        train_in_process(tmp_path / "s", NODES, **{**SAFE, "safe.fine": 6})
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "s").exists()
    with pytest.raises(ConfigError, match=message):
        check_run_config("method='safe' task='digits-mlp' safe.fine=6")
    check_run_config("method='safe' task='digits-mlp' safe.fine=5")
    check_run_config("method='protosisa' task='digits-mlp' safe.fine=6")  # ProtoSISA's shards hold every class


def test_safe_defaults_give_every_clique_enough_classes_for_its_one_vs_all_adapters():
    """A user who passes only method and task gets a graph that trains: rt-minilm's 2 classes in one group,
    a ten-class task's in two groups of five, fortunes' 43 in four groups."""
    from fedforget.core.config import parse_run_config
    from fedforget.unlearning.run_config import check_run_config

    check_run_config("method='safe' task='rt-minilm'")
    assert parse_run_config({"method": "safe", "task": "rt-minilm"}).safe.fine == 1
    for task in ("digits-mlp", "fmnist-cnn", "fmnist-effnet"):
        assert parse_run_config({"method": "safe", "task": task}).safe.fine == 2
    assert parse_run_config({"method": "safe", "task": "fortunes-minilm"}).safe.fine == 4
