"""FedShard's fairness weighs accuracy by each client's label shares: from the nodes' reported counts, and from
the public data set only for an old store whose nodes hold public records."""

from __future__ import annotations

import numpy as np
import pytest

from fedforget.cli_kit.errors import UsageError
from fedforget.core.config import RunConfig
from fedforget.methods.fedshard.fairness import label_shares
from fedforget.tasks.server_data import holds_local_records

CFG = RunConfig(task="digits-mlp")
PUBLIC = {"0": {"name": "node-0", "records": "public"}, "1": {"name": "node-1", "records": "public"}}


def _refuse_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(cfg: RunConfig) -> None:
        raise AssertionError("the public data set was read")

    monkeypatch.setattr("fedforget.tasks.registry.load_task_data", refuse)


def test_reported_class_counts_give_the_shares_without_reading_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    _refuse_rows(monkeypatch)
    manifest = {"class-counts": {"0": [3, 1, 0], "1": [0, 0, 0]}, "nodes": {**PUBLIC, "1": {"records": "local"}}}
    shares = label_shares(manifest, CFG, 3, [0, 1])
    assert np.allclose(shares[0], [0.75, 0.25, 0.0]) and np.allclose(shares[1], [0.0, 0.0, 0.0])


@pytest.mark.parametrize("counts", [{"0": [1, 2]}, {"0": [1, 2, -1]}, {"0": [1, 2, 0.5]}, {"0": [True, 1, 1]},
                                    {}, [], "x", {"0": "123"}])
def test_damaged_class_counts_are_refused_in_one_line(monkeypatch: pytest.MonkeyPatch, counts: object) -> None:
    _refuse_rows(monkeypatch)
    with pytest.raises(UsageError) as err:
        label_shares({"class-counts": counts}, CFG, 3, [0])
    assert "\n" not in str(err.value) and "class-counts" in str(err.value)


def test_an_old_store_of_local_records_is_refused_without_reading_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    _refuse_rows(monkeypatch)
    with pytest.raises(UsageError) as err:
        label_shares({"nodes": {**PUBLIC, "1": {"name": "mine", "records": "local"}}, "partitions": {}}, CFG, 10, [0])
    assert "\n" not in str(err.value) and "class-counts" in str(err.value)


@pytest.mark.parametrize("nodes", [None, PUBLIC])
def test_an_old_store_of_public_records_is_counted_on_the_public_set(nodes: object) -> None:
    from fedforget.tasks.registry import load_task_data

    train = load_task_data(CFG).train
    ids = train.ids[:20].tolist()
    manifest = {"partitions": {"0": [ids[:10], ids[10:]]}, **({"nodes": nodes} if nodes else {})}
    expected = np.bincount(train.labels[:20].numpy(), minlength=10) / 20
    assert np.allclose(label_shares(manifest, CFG, 10, [0])[0], expected)


@pytest.mark.parametrize("manifest, local", [
    ({}, False), ({"nodes": {}}, False), ({"nodes": PUBLIC}, False),
    ({"nodes": {**PUBLIC, "2": {"name": "x", "records": "local"}}}, True),
    ({"nodes": ["not", "a", "map"]}, True), ({"nodes": {"0": "public"}}, True),  # not what a store writes
])
def test_a_store_holds_local_records_when_any_node_says_so(manifest: dict, local: bool) -> None:
    assert holds_local_records(manifest) is local
