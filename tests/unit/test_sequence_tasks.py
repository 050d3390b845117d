"""A sequence task (``Task(targets=...)``, a language model): its targets come from its inputs, so its records need
no label column; training's default loss and every evaluation compare the logits per position with the targets
over the positions that predict something (the server's batch-by-batch evaluation and the served probabilities give
the same accuracy and loss); ``head=False`` serves the backbone's output as the logits with LoRA alone trained; bad
targets and a method whose training cannot take such a task are refused in one line; the store records the targets
function and a retrain with another is refused."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch import nn

from fedforget.client import Task
from fedforget.core.config import ConfigError, parse_run_config
from fedforget.federation.serve import class_probabilities, probability_metrics
from fedforget.methods.registry import BY_VARIANT, FAMILIES
from fedforget.tasks.base import IGNORE, Backbone
from fedforget.tasks.local_records import read_local_records
from fedforget.tasks.peft_modules import build_task_model
from fedforget.tasks.sequence_targets import checked_targets, next_token_targets
from fedforget.tasks.task_functions import manifest_entry, probe_metric, refuse_task_loss, retrain_entry
from fedforget.training.supervised import cross_entropy, evaluate

VOCAB = 11


class TinyDecoder(nn.Module):
    """token ids -> per-position logits over VOCAB (its own output layer: no fedforget head)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, 8)
        self.mix = nn.Linear(8, 8)
        self.out = nn.Linear(8, VOCAB)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.mix(self.embed(ids)))) * mask.unsqueeze(-1)


def lm_task(**changes: object) -> Task:
    fields = {"name": "lm", "backbone": TinyDecoder, "feature_dim": VOCAB, "num_classes": VOCAB,
              "lora_targets": ["mix", "out"], "head": False, "targets": next_token_targets}
    return Task(**{**fields, **changes})


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 0, 0], [7, 8, 9, 0]])
    return ids, (ids != 0).to(torch.int64)


def test_next_token_targets_predict_each_following_token_and_nothing_past_the_text():
    assert next_token_targets(*batch()).tolist() == [[2, 3, 4, IGNORE], [6, IGNORE, IGNORE, IGNORE],
                                                     [8, 9, IGNORE, IGNORE]]


def test_a_sequence_tasks_default_loss_is_cross_entropy_over_the_predicting_positions():
    logits = torch.randn(3, 4, VOCAB, generator=torch.Generator().manual_seed(2))
    targets = next_token_targets(*batch())
    kept = targets != IGNORE
    expected = nn.functional.cross_entropy(logits[kept], targets[kept])
    assert torch.allclose(cross_entropy(logits, targets), expected)
    labels = torch.tensor([1, 2, 0])
    assert torch.equal(cross_entropy(logits[:, 0], labels), nn.functional.cross_entropy(logits[:, 0], labels))


def test_the_servers_evaluation_and_the_served_probabilities_agree_on_a_sequence_task():
    model = TinyDecoder()
    inputs = batch()
    targets = next_token_targets(*inputs)
    direct = evaluate(model, inputs, targets)
    with torch.no_grad():
        served = probability_metrics(class_probabilities(model(*inputs)), targets)
    assert direct["num-examples"] == served["num-examples"] == 3
    assert direct["accuracy"] == pytest.approx(served["accuracy"])
    assert direct["loss"] == pytest.approx(served["loss"], rel=1e-6)


def test_head_false_serves_the_backbones_output_and_trains_lora_alone():
    backbone = Backbone(TinyDecoder(), VOCAB, ["mix", "out"])
    model = build_task_model(backbone, VOCAB, lora_r=2, lora_alpha=4, seed=1, head=False)
    assert model.head_state() == {}
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    with torch.no_grad():
        assert model(*batch()).shape == (3, 4, VOCAB)


@pytest.mark.parametrize(("changes", "says"), [
    ({"head": True}, "head=False"),
    ({"feature_dim": 5}, "feature_dim=num_classes"),
    ({"targets": "next"}, "must be a function"),
])
def test_a_sequence_task_defined_wrongly_is_refused_when_it_is_defined(changes, says):
    with pytest.raises((ValueError, TypeError), match=says):
        lm_task(**changes)


@pytest.mark.parametrize(("targets", "says"), [
    (lambda ids, mask: ids.float(), "not an int64 tensor"),
    (lambda ids, mask: ids[:, 0], "not an int64 tensor"),
    (lambda ids, mask: ids[:2], "for 3 records"),
    (lambda ids, mask: ids + VOCAB, "outside the task's classes"),
])
def test_targets_that_do_not_fit_the_task_are_refused_in_one_line(targets, says):
    with pytest.raises(ValueError, match=says) as info:
        checked_targets(targets, batch(), VOCAB)
    assert "\n" not in str(info.value)


def test_methods_whose_training_takes_no_task_loss_refuse_a_sequence_task():
    spec = lm_task().spec
    for family in FAMILIES:
        for variant in family.variants:
            if family.refuses_task_loss is None:
                refuse_task_loss(family, variant, spec)
            else:
                with pytest.raises(ConfigError, match="sequence task"):
                    refuse_task_loss(family, variant, spec)
    assert {"safe", "hosfl"} <= {v for v, m in BY_VARIANT.items() if m.refuses_task_loss is not None}


def perplexity(probabilities: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    kept = targets != IGNORE
    picked = probabilities[kept][np.arange(int(kept.sum())), targets[kept]]
    return {"perplexity": float(np.exp(-np.log(picked).mean()))}


def test_a_sequence_tasks_metric_is_probed_per_position_and_its_targets_recorded():
    spec = lm_task(metric=perplexity).spec
    assert probe_metric(spec) == ["perplexity"]
    entry = manifest_entry(spec)["task-functions"]
    assert entry["targets"].endswith(":next_token_targets") and entry["metric-names"] == ["perplexity"]
    assert "targets" not in (manifest_entry(lm_task(targets=None, head=True, feature_dim=8).spec).get(
        "task-functions") or {})
    other = dataclasses.replace(spec, targets=lambda ids, mask: next_token_targets(ids, mask))
    with pytest.raises(ConfigError, match="targets"):
        retrain_entry(manifest_entry(spec), other)


APP = """
from fedforget.tasks.sequence_targets import next_token_targets
from torch import nn
import torch

class Dec(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = nn.Linear(1, 50)
    def forward(self, ids, mask):
        return self.out(ids.unsqueeze(-1).float())

def encode(texts):
    ids = torch.tensor([[len(w) for w in t.split()][:4] + [0] * (4 - len(t.split()[:4])) for t in texts])
    return ids, (ids != 0).to(torch.int64)

from fedforget.client import Task
LM = Task(name="lm", backbone=Dec, feature_dim=50, num_classes=50, lora_targets=["out"], head=False,
          input_column="text", encode=encode, targets=next_token_targets)
"""


def test_a_sequence_tasks_records_need_no_label_and_carry_their_targets(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):
    name = f"lmapp_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(APP))
    monkeypatch.syspath_prepend(str(tmp_path))
    data = tmp_path / "node"
    data.mkdir()
    pq.write_table(pa.table({"record_id": ["a", "b"], "text": ["one two three", "four five"]}),
                   data / "train.parquet")
    cfg = parse_run_config({"task": f"{name}:LM"})
    records = read_local_records(data, cfg, "node-0", 50)
    assert records.examples.labels.tolist() == [0, 0]
    targets = dict(zip(records.record_ids, records.examples.targets.tolist(), strict=True))
    assert targets == {"a": [3, 5, IGNORE, IGNORE], "b": [4, IGNORE, IGNORE, IGNORE]}
    row = records.record_ids.index("b")
    assert records.examples.subset([row]).targets.tolist() == [[4, IGNORE, IGNORE, IGNORE]]
