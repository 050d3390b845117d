"""A simulated node in `verify --federation`'s reference run reads the state it trained with (the verified store's
clients/<p>, where its registration and deletions are), as a SuperNode reads its own state dir; any other run
keeps its state under its own store."""

from __future__ import annotations

from flwr.app import Context, RecordDict

from fedforget.core.config import parse_run_config
from fedforget.federation.client_site import VERIFY_SCRATCH, client_state_dir


def context(node_config: dict) -> Context:
    return Context(run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config={})


def test_a_reference_runs_nodes_read_the_verified_stores_client_state(tmp_path):
    scratch = tmp_path / "s" / VERIFY_SCRATCH / "store"
    cfg = parse_run_config({"store": str(scratch), "reference": True})
    assert client_state_dir(context({}), cfg, 2) == tmp_path / "s" / "clients" / "2"


def test_a_training_run_or_a_configured_state_dir_is_left_as_it_is(tmp_path):
    scratch = tmp_path / "s" / VERIFY_SCRATCH / "store"
    assert client_state_dir(context({}), parse_run_config({"store": str(scratch)}), 2) == scratch / "clients" / "2"
    elsewhere = parse_run_config({"store": str(tmp_path / "other" / "store"), "reference": True})
    assert client_state_dir(context({}), elsewhere, 0) == tmp_path / "other" / "store" / "clients" / "0"
    cfg = parse_run_config({"store": str(scratch), "reference": True})
    assert client_state_dir(context({"state-dir": "/node/state"}), cfg, 1).as_posix() == "/node/state"
