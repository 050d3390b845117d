"""A node that registers bad data (a name no command can parse, ids outside the ledger's range, rows the
public set does not have, more records than the operator allows, replies of the wrong shape) is refused
before any training: the ServerApp logs one line naming the node and what is wrong with it, and the
store is never written (in process: the real ServerApp and ClientApp, one node's reply tampered with)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, Context, Message, RecordDict

from fedforget.client_app import app as client_app
from fedforget.federation.control_messages import RegisterQuery
from fedforget.inprocess import run_in_process
from fedforget.server_app import NodeDataRefused

from . import test_server_app_bad_run_config as one_line

flwr_lines = one_line.flwr_lines  # Flower's log records, the refusal filter removed afterwards

CONFIG = {"task": "digits-mlp", "method": "fedavg", "train-size": 200, "num-rounds": 1, "local-epochs": 1}
NODES = 2
#: 2^63 + 5 as an unsigned id: what a node computing ids in uint64 would send
TOO_BIG = np.asarray([2**63 + 5], dtype=np.uint64)


def _info(key: str, value: object) -> Callable[[RecordDict], None]:
    def change(content: RecordDict) -> None:
        content["info"][key] = value
    return change


def _array(key: str, value: Array) -> Callable[[RecordDict], None]:
    def change(content: RecordDict) -> None:
        content["arrays"][key] = value
    return change


def _samples(edit: Callable[[np.ndarray], np.ndarray], slices: bool = True) -> Callable[[RecordDict], None]:
    """Replace the sample ids with ``edit(ids)`` (and give each new id slice 0, unless ``slices`` is False)."""
    def change(content: RecordDict) -> None:
        arrays = content["arrays"]
        ids = edit(arrays["samples"].numpy())
        arrays["samples"] = Array(np.ascontiguousarray(ids))
        if slices:
            old = arrays["slice"].numpy()
            arrays["slice"] = Array(np.concatenate([old, np.zeros(max(0, len(ids) - len(old)), np.int64)])[:len(ids)])
    return change


def hostile(change: Callable[[RecordDict], None]) -> Callable[[Message, Context], Message]:
    """fedforget's ClientApp, except that partition 0 answers the registration with ``change`` applied."""
    def client(msg: Message, context: Context) -> Message:
        reply = client_app(msg, context)
        if RegisterQuery.asked(msg.content) and context.node_config["partition-id"] == 0:
            change(reply.content)
        return reply
    return client


BAD_REPLIES = {
    "name with a colon": (_info("node-name", "evil:x"), "node name 'evil:x'"),
    "name that is a path": (_info("node-name", "../../etc/passwd"), "node name '../../etc/passwd'"),
    "empty name": (_info("node-name", ""), "node name ''"),
    "name of another type": (_info("node-name", 7), "node-name"),
    "records numbered otherwise": (_info("records", "guess"), "numbers its records 'guess'"),
    "negative id": (_samples(lambda ids: np.concatenate([ids, [-5]])), "sample id -5"),
    "id past 2^63": (_samples(lambda ids: np.concatenate([ids.astype(np.uint64), TOO_BIG])), "9223372036854775813"),
    "float ids": (_samples(lambda ids: ids.astype(np.float64)), "not integers"),
    "phantom public row": (_samples(lambda ids: np.concatenate([ids, [1_000_000]])), "1000000"),
    "duplicate id": (_samples(lambda ids: np.concatenate([ids, ids[:1]])), "sample id twice"),
    "slices of another length": (_samples(lambda ids: ids[:-1], slices=False), "samples but"),
    "ids that are no array": (_array("samples", Array(dtype="<i8", shape=(3,), stype="numpy.ndarray", data=b"junk")),
                              "samples is not a numpy array"),
    "partition outside the federation": (_info("partition-id", -1), "partition -1"),
    "a refusal of many lines": (_info("refused", "its data is gone\nTraceback (most recent call last):"),
                                "refused the run: its data is gone"),
}


def refused_line(lines, tmp_path: Path, client, **config: object) -> tuple[str, Path]:  # noqa: ANN001
    store = tmp_path / "store"
    with pytest.raises(NodeDataRefused):
        run_in_process({**CONFIG, "store": str(store), **config}, NODES, client_app=client)
    errors = [r.getMessage() for r in lines.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, lines.text()
    return errors[0], store


@pytest.mark.parametrize("case", list(BAD_REPLIES))
def test_a_node_registering_bad_data_is_refused_in_one_line_and_nothing_is_written(case, tmp_path, flwr_lines):
    change, expected = BAD_REPLIES[case]
    line, store = refused_line(flwr_lines, tmp_path, hostile(change))
    assert expected in line and "\n" not in line and len(line) < 600, line
    assert "partition 0" in line or "node-0" in line, line
    assert "--run-config" not in line and "bad run config" not in line, line
    assert not store.exists(), sorted(p.name for p in store.rglob("*"))


@pytest.mark.parametrize(("config", "expected"), [
    ({"max-records-per-node": 60}, "'max-records-per-node'=60"),
    ({"max-records": 150}, "'max-records'=150"),
])
def test_a_node_registering_more_records_than_the_operator_allows_is_refused(config, expected, tmp_path, flwr_lines):
    line, store = refused_line(flwr_lines, tmp_path, client_app, **config)
    assert expected in line and "node-" in line and "--run-config" not in line, line
    assert not store.exists()


def _contents(root: Path) -> dict[str, bytes]:
    """Every file of the store but its run lock (a run writes who holds it), by path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "run.lock"}


def test_a_retrain_refused_at_registration_leaves_the_store_as_it_was(tmp_path, flwr_lines):
    store = tmp_path / "store"
    run_in_process({**CONFIG, "store": str(store)}, NODES)
    before = _contents(store)
    with pytest.raises(NodeDataRefused):
        run_in_process({**CONFIG, "store": str(store), "action": "retrain"}, NODES,
                       client_app=hostile(_samples(lambda ids: np.concatenate([ids, [-5]]))))
    errors = [r.getMessage() for r in flwr_lines.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "node node-0 (partition 0) registered sample id -5" in errors[0], errors
    assert _contents(store) == before
