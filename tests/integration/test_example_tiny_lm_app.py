"""The example app examples/tiny-lm (a pretrained language model's first two layers and its LM head, LoRA, the
language-model loss, perplexity as its metric, texts without labels) trains through its own ServerApp with the chain
method FedSGT: what is served is LoRA modules only (no fedforget head), its perplexity is reported on the server's
and the nodes' texts and falls far below the untrained model's, and a text forgotten by its name is gone after a
retrain through the app, bit for bit as training from scratch without it (a reference that kept it is not)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from fedforget.federation.record_key import hand_over
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.tombstones import add_tombstones
from fedforget.unlearning.cli import app as cli
from fedforget.unlearning.user_app import declared_config
from fedforget.unlearning.verify import verify_store

from .helpers import example_home, example_script, served_tensors

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-lm"
NODES = 3
RECORD = "node-1:member-1-007"
KEY = "5a" * 32  # the store's record key (a store's own is random)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return example_home(EXAMPLE, tmp_path, monkeypatch)


def run_app(store: Path, action: str = "train") -> Store:
    from tiny_lm.client_app import app as client_app
    from tiny_lm.server_app import app as server_app

    run_in_process({**declared_config(EXAMPLE), "store": str(store), "action": action}, NODES,
                   server_app=server_app, client_app=client_app)
    return Store.open(store)


def served_keys(store: Store) -> set[str]:
    """The served tensors' names, without their artifact."""
    return {key.split(":", 1)[1] for key in served_tensors(store)}


def untrained_perplexity() -> float:
    """The app's own model, no LoRA, on the server's texts: what training starts from."""
    from tiny_lm.task import TinyLM, encode, language_model_loss, next_tokens

    texts = pq.read_table(EXAMPLE / "data" / "server" / "test.parquet").column("text").to_pylist()
    inputs = encode(texts)
    with torch.no_grad():
        return float(np.exp(float(language_model_loss(TinyLM()(*inputs), next_tokens(*inputs)))))


def reference_through_the_app(keep_forgotten: bool = False):
    """``verify``'s reference: the app trained from scratch under the store's key, each node holding what the
    ledger forgot from it as deleted (``keep_forgotten``: the negative control, trained on the text)."""
    def reference(store: Store, workdir: Path, forgotten: dict[int, list[int]]) -> tuple[Store, set]:
        scratch = workdir / ("kept" if keep_forgotten else "reference")
        hand_over(scratch, KEY)
        for partition, samples in forgotten.items():
            if not keep_forgotten:
                add_tombstones(scratch / "clients" / str(partition), f"local:node-{partition}", samples)
        return run_app(scratch), set()

    return reference


def test_the_example_trains_its_language_model_reports_perplexity_and_forgets_a_text_exactly(home):
    root = home / "runs" / "tiny-lm"
    hand_over(root, KEY)
    store = run_app(root)
    manifest = store.manifest()
    assert manifest["task"] == "tiny_lm.task:TASK" and manifest["method"] == "fedsgt"
    assert manifest["task-functions"] == {"loss": "tiny_lm.task:language_model_loss",
                                          "metric": "tiny_lm.task:perplexity", "metric-names": ["perplexity"],
                                          "targets": "tiny_lm.task:next_tokens"}
    keys = served_keys(store)
    assert keys and all("lora_" in k for k in keys)  # LoRA modules only: the model's own LM head is the output
    assert any("unembed" in k for k in keys) and any("q_proj" in k for k in keys)

    final = next(row for row in reversed(store.metrics()) if row.get("final"))
    assert final["perplexity"] == pytest.approx(np.exp(final["loss"]), rel=1e-9)  # over the same targets
    assert final["perplexity"] < untrained_perplexity() / 100 and final["perplexity"] < 2000
    assert final["federated-perplexity"] < 2000 and final["federated-nodes"] == NODES
    trained = store.manifest()

    result = CliRunner().invoke(cli, ["forget", "--store", str(root), "--record", RECORD])
    assert result.exit_code == 0, result.output
    retrained = run_app(root, action="retrain")
    assert retrained.manifest()["task"] == trained["task"]

    report = verify_store(Store.open(root), reference=reference_through_the_app())
    assert report["exact"] is True, report["reason"]
    assert report["outputs"]["compared"] is True  # the served next-token probabilities, bit for bit
    control = verify_store(Store.open(root), reference=reference_through_the_app(keep_forgotten=True))
    assert control["exact"] is False  # a reference trained on the text is caught


def test_the_example_data_script_writes_the_committed_texts(tmp_path):
    example_script(EXAMPLE, "make_data").main(tmp_path)
    committed = sorted(p.relative_to(EXAMPLE / "data") for p in (EXAMPLE / "data").rglob("*.parquet"))
    assert committed == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.parquet"))
    for path in committed:
        assert pq.read_table(tmp_path / path).equals(pq.read_table(EXAMPLE / "data" / path)), path
