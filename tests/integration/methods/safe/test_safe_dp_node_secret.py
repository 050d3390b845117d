"""SAFE-DP's noise belongs to the training nodes: a run on the same node secrets reproduces every DP
adapter bit for bit, a run with other secrets does not, the secrets never reach a message or the
server's store, and `verify` names the DP adapters it cannot check."""

from __future__ import annotations

import shutil

import pytest
from flwr.app import ArrayRecord
from typer.testing import CliRunner

from fedforget.inprocess import InProcessGrid
from fedforget.methods.safe.node_secret import SECRET_FILE
from fedforget.store import Store
from fedforget.unlearning.cli import app
from fedforget.unlearning.verify import verify_store
from tests.integration.helpers import train_in_process

NODES = 3
SAFE_DP = {"method": "safe", "safe.coarse": 1, "safe.fine": 2, "num-rounds": 1, "safe.adapter-steps": 6,
           "train-size": 240, "safe.dp": True, "safe.dp-epsilon": 4.0, "safe.dp-delta": 1e-5, "safe.dp-alpha": 8.0}


def _content_bytes(message) -> bytes:  # noqa: ANN001
    if not message.has_content():
        return b""
    out = []
    for record in message.content.values():
        if isinstance(record, ArrayRecord):
            out += [array.data for array in record.values()]
        else:
            out.append(repr(dict(record)).encode())
    return b"".join(out)


@pytest.fixture(scope="module")
def dp_store(tmp_path_factory):
    """A SAFE-DP store, with every message the server and the nodes exchanged while training it."""
    seen: list[bytes] = []
    push, pull = InProcessGrid.push_messages, InProcessGrid.pull_messages

    def pushed(self, messages):  # noqa: ANN001, ANN202
        messages = list(messages)
        seen.extend(_content_bytes(m) for m in messages)
        return push(self, messages)

    def pulled(self, ids):  # noqa: ANN001, ANN202
        replies = list(pull(self, ids))
        seen.extend(_content_bytes(m) for m in replies)
        return replies

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(InProcessGrid, "push_messages", pushed)
        patch.setattr(InProcessGrid, "pull_messages", pulled)
        store = train_in_process(tmp_path_factory.mktemp("dp") / "store", NODES, **SAFE_DP)
    return store, b"".join(seen)


def _secrets(store: Store) -> dict[int, bytes]:
    return {p: (store.root / "clients" / str(p) / SECRET_FILE).read_bytes() for p in range(NODES)
            if (store.root / "clients" / str(p) / SECRET_FILE).is_file()}


def _dp_adapters(store: Store) -> list[str]:
    ledger = store.ledger()
    try:
        return sorted(a["artifact"] for a in ledger.artifacts() if a["meta"].get("dp"))
    finally:
        ledger.close()


def test_node_secrets_never_reach_a_message_or_the_servers_store(dp_store):
    store, traffic = dp_store
    secrets = _secrets(store)
    assert len(secrets) == NODES and len(set(secrets.values())) == NODES
    server_side = b"".join(p.read_bytes() for p in store.root.rglob("*")
                           if p.is_file() and "clients" not in p.relative_to(store.root).parts)
    assert traffic and server_side
    for secret in secrets.values():
        for form in (secret, secret.hex().encode()):
            assert form not in traffic and form not in server_side


def test_dp_adapters_replay_on_the_same_node_secrets_and_differ_without_them(dp_store, tmp_path):
    store, _ = dp_store
    dp = _dp_adapters(store)
    assert dp
    same = verify_store(store, include_all=True)  # scratch run on the nodes' own secrets: bit for bit
    rows = {c["artifact"]: c for c in same["compared"]}
    assert same["exact"] and all(rows[a]["equal"] for a in dp) and not same["not_checked"]

    other = tmp_path / "other-secrets"
    shutil.copytree(store.root, other)
    for p in range(NODES):  # the same config and store, other node secrets: the noise is not reproduced
        (other / "clients" / str(p) / SECRET_FILE).write_bytes(bytes([p + 1]) * 32)
    changed = verify_store(Store.open(other), include_all=True)
    rows = {c["artifact"]: c for c in changed["compared"]}
    assert not changed["exact"] and not any(rows[a]["equal"] for a in dp)
    assert "differ from scratch" in changed["reason"]


def test_verify_names_the_dp_adapters_it_cannot_check_when_the_secrets_are_elsewhere(dp_store, tmp_path):
    store, _ = dp_store
    copy = tmp_path / "no-secrets"
    shutil.copytree(store.root, copy)
    for p in range(NODES):  # nodes that keep their state dir (and secret) on their own machine
        (copy / "clients" / str(p) / SECRET_FILE).unlink()
    report = verify_store(Store.open(copy))
    dp_served = sorted(set(_dp_adapters(store)) & {c["artifact"] for c in report["compared"] if c["served"]})
    assert dp_served and report["dp_unreproducible"] == dp_served
    assert sorted(u["artifact"] for u in report["not_checked"]) == dp_served
    assert all("node secret" in u["why"] for u in report["not_checked"])
    assert report["served"] >= 1 and report["exact"]  # the rest (prototypes) still bit for bit
    text = CliRunner().invoke(app, ["verify", "--store", str(copy)], terminal_width=400)
    assert text.exit_code == 0, text.output
    for adapter in dp_served:
        assert f"DP adapter not checked bit for bit: {adapter}" in text.output
    assert f"{len(dp_served)} served DP adapter(s) not checked" in text.output
