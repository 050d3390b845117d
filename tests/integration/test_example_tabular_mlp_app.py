"""The example Flower app (examples/tabular-mlp: its own MLP, its nodes' own records, fedforget's strategies and
ClientApp) trains in process; a record forgotten by the name its node knows it by is gone after a retrain
through that app, bit for bit as training from scratch without it; the store names the app that trained it.
Its nodes' records are numbered under the store's record key; a store numbered before record keys keeps its
unkeyed ids and its bytes, and still verifies. What both serve after training and after the retrain is pinned
in ``served_sha256.json``."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedforget.core.config import ConfigError
from fedforget.core.record_ids import local_sample_id, store_record_key
from fedforget.federation.record_key import hand_over
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.tombstones import add_tombstones
from fedforget.unlearning.cli import app as cli
from fedforget.unlearning.user_app import declared_config
from fedforget.unlearning.verify import verify_store

from .helpers import copy_store, example_home, example_script, served_sha
from .served_bytes import assert_changed_served_byte_is_caught, assert_serves_recorded_bytes

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tabular-mlp"
NODES = 3
RECORD = ("node-1", "patient-1-007")
PINNED = "example/tabular-mlp"  # its served bytes' name in served_sha256.json
#: the pinned store's record key, handed to its training run so that what it serves can be pinned (a store's
#: own key is random)
KEY = "7a" * 32
#: a store numbered before record keys: its served bytes are those the example served before them
UNKEYED = "example/tabular-mlp unkeyed"


def app_config() -> dict[str, object]:
    """The example's [tool.flwr.app.config], flattened as Flower reads it."""
    return declared_config(EXAMPLE)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return example_home(EXAMPLE, tmp_path, monkeypatch)


def run_app(store: Path, action: str = "train") -> None:
    from tabular_mlp.client_app import app as client_app
    from tabular_mlp.server_app import app as server_app

    run_in_process({**app_config(), "store": str(store), "action": action}, NODES, server_app=server_app,
                   client_app=client_app)


def reference_through_the_app(store: Store, workdir: Path, forgotten: dict[int, list[int]]) -> tuple[Store, set]:
    """``verify --federation``'s reference, in this process: the app trained from scratch under the store's
    record key, each node holding what the ledger forgot from it as deleted (as a node that received every
    request does)."""
    scratch = workdir / "reference"
    hand_over(scratch, store_record_key(store.manifest()))
    for partition, samples in forgotten.items():
        add_tombstones(scratch / "clients" / str(partition), f"local:node-{partition}", samples)
    run_app(scratch)
    return Store.open(scratch), set()


def test_the_example_trains_forgets_and_retrains_exactly_through_its_own_app(home):
    store = home / "runs" / "tabular-mlp"
    hand_over(store, KEY)
    run_app(store)
    manifest = Store.open(store).manifest()
    assert manifest["record-ids"] == {"scheme": "hmac-sha256", "key": KEY}
    assert manifest["task"] == "tabular_mlp.task:TASK"
    assert manifest["app"] == {"dir": str(EXAMPLE), "name": "example/tabular-mlp", "version": "1.0.0"}
    assert manifest["nodes"] == {str(p): {"name": f"node-{p}", "records": "local"} for p in range(NODES)}
    assert Store.open(store).metrics()[-1]["accuracy"] > 0.8  # the app's MLP learns its task
    trained = served_sha(Store.open(store))
    trained_copy = copy_store(store, home, "trained").root  # what the app served after training, kept for its pin

    result = CliRunner().invoke(cli, ["forget", "--store", str(store), "--record", ":".join(RECORD)])
    assert result.exit_code == 0, result.output
    a_guess_finds_nothing_in_the_exported_log(store, home / "log.jsonl")
    run_app(store, action="retrain")
    retrained = served_sha(Store.open(store))
    assert retrained != trained

    reference = home / "reference"  # from scratch under the store's key, node-1 holding the record as deleted
    hand_over(reference, KEY)
    add_tombstones(reference / "clients" / "1", f"local:{RECORD[0]}", [local_sample_id(*RECORD, KEY)])
    run_app(reference)
    assert served_sha(Store.open(reference)) == retrained

    result = CliRunner().invoke(cli, ["status", "--store", str(store), "--json"])
    assert result.exit_code == 0 and "tabular_mlp.task:TASK" in result.output, result.output
    served_predictions(store)
    assert_changed_served_byte_is_caught(PINNED, trained_copy, home)
    assert_serves_recorded_bytes(PINNED, {**app_config(), "record-key": KEY}, trained_copy, store)  # last: it skips


def a_guess_finds_nothing_in_the_exported_log(store: Path, out: Path) -> None:
    """A third party holding only the exported log guesses the forgotten record's name: the sample id the guess
    gives (the unkeyed sha256 anyone can compute) is not in the log; the store's keyed id is (the log does
    carry the request's sample ids, so the search would find a guessable one)."""
    import re

    result = CliRunner().invoke(cli, ["log", "export", "--store", str(store), "--out", str(out)])
    assert result.exit_code == 0, result.output
    numbers = set(re.findall(r"\d{6,}", out.read_text(encoding="utf-8")))
    assert str(local_sample_id(*RECORD, store_record_key(Store.open(store).manifest()))) in numbers
    assert str(local_sample_id(*RECORD)) not in numbers


def test_a_store_numbered_before_record_keys_keeps_its_ids_and_bytes_and_still_verifies(home):
    """A store without ``record-ids`` (as every store was before record keys): its nodes' ids stay the unkeyed
    sha256, a record resolves to that id, its retrain and its reference keep them, and it serves the bytes
    the example served before record keys."""
    store = home / "runs" / "tabular-mlp"
    hand_over(store, None)
    run_app(store)
    manifest = Store.open(store).manifest()
    assert "record-ids" not in manifest and store_record_key(manifest) is None
    held = {i for s in manifest["partitions"]["1"] for i in s}
    assert local_sample_id(*RECORD) in held
    trained_copy = copy_store(store, home, "trained").root
    result = CliRunner().invoke(cli, ["forget", "--store", str(store), "--record", ":".join(RECORD), "--json"])
    assert result.exit_code == 0, result.output
    ledger = Store.open(store).ledger()
    try:
        assert [spec["samples"] for _, spec in ledger.request_specs()] == [[local_sample_id(*RECORD)]]
    finally:
        ledger.close()
    run_app(store, action="retrain")
    report = verify_store(Store.open(store), reference=reference_through_the_app)
    assert report["exact"] is True, report["reason"]
    assert "record-ids" not in Store.open(store).manifest()
    assert_serves_recorded_bytes(UNKEYED, {**app_config(), "record-key": None}, trained_copy, store)


def served_predictions(store: Path) -> None:
    """The forget service's predict takes the app's records' features (16 numbers) and nothing else."""
    import pyarrow.parquet as pq
    from fastapi.testclient import TestClient

    from fedforget.service.app import create_app
    from fedforget.service.tokens import create_token

    token = create_token(store, "predict", ["predict"])[0]
    test = pq.read_table(EXAMPLE / "data" / "server" / "test.parquet").to_pylist()[:8]
    with TestClient(create_app(store)) as client:
        auth = {"Authorization": f"Bearer {token}"}
        reply = client.post("/v1/predict", json={"inputs": [r["features"] for r in test]}, headers=auth)
        assert reply.status_code == 200, reply.text
        predictions = reply.json()["predictions"]
        assert sum(p == r["label"] for p, r in zip(predictions, test, strict=True)) >= 6
        assert reply.json()["task"] == "tabular_mlp.task:TASK"
        short = client.post("/v1/predict", json={"inputs": [test[0]["features"][:15]]}, headers=auth)
        assert short.status_code in (400, 422) and "takes 16" in short.text, short.text


def test_a_wrong_task_reference_in_the_app_is_one_config_error_before_any_store(home):
    from tabular_mlp.client_app import app as client_app
    from tabular_mlp.server_app import app as server_app

    for task, message in (("tabular_mlp.task:NOPE", "has no attribute 'NOPE'"),
                          ("tabular_mlp.nowhere:TASK", "cannot import 'tabular_mlp.nowhere'")):
        with pytest.raises(ConfigError, match=message):
            run_in_process({**app_config(), "task": task, "store": str(home / "s")}, NODES, server_app=server_app,
                           client_app=client_app)
        assert not (home / "s").exists()


def test_the_example_data_script_writes_the_committed_records(tmp_path):
    example_script(EXAMPLE, "make_data").main(tmp_path)
    for path in sorted((EXAMPLE / "data").rglob("*.parquet")):
        import pyarrow.parquet as pq

        assert pq.read_table(tmp_path / path.relative_to(EXAMPLE / "data")).equals(pq.read_table(path)), path
