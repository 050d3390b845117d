"""``hf``: any Hugging Face data set (through flwr-datasets) on any timm or transformers backbone.

The generic path for users with internet (or with local copies): ``hf-dataset`` is a Hub id or a local
folder that ``datasets.load_dataset`` understands (CSV/JSON/Parquet files, an image folder, ...);
``hf-model`` picks the backbone:

* ``timm/<repo>`` (a Hub repo of the ``timm`` organisation, loaded as ``hf-hub:timm/<repo>``) or
  ``timm:<name>`` (anything ``timm.create_model`` accepts, e.g. ``timm:resnet18.a1_in1k`` or
  ``timm:local-dir:/path/to/folder``) → an image model, ``pretrained=True, num_classes=0``.
  LoRA targets: every ``nn.Linear`` and every pointwise (1x1, ungrouped) ``nn.Conv2d`` in the network —
  ``qkv``/``proj``/``fc1``/``fc2`` in a ViT, the 1x1 convs of a ResNet/EfficientNet; peft wraps both kinds.
* anything else → a transformers encoder (``AutoModel`` + ``AutoTokenizer``, a Hub id or a local
  folder), masked-mean pooled. LoRA targets: the linear layers of the self-attention blocks (every
  ``nn.Linear``/``Conv1D`` whose qualified name contains ``attention``/``attn``: query, key, value and
  the attention output projection in BERT). peft's ``"all-linear"`` shortcut only works on a
  ``PreTrainedModel``, and our pooling wrapper is not one, so we list those modules by full name.
  The MLP blocks are left frozen: attention-only LoRA is the usual, cheaper choice for classification.

Labels come from ``hf-label-column``, mapped to ``0..C-1`` in sorted order of the raw values; the
input column is ``hf-input-column`` or, if empty, the first of ``text``/``sentence`` (text models) or
``image``/``img`` (image models). Splits are loaded unshuffled, so a sample's id is its row in the
data set's ``train`` split (or in our fixed 80% of it when the data set has no ``test`` split).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fedforget.core.config import RunConfig
from fedforget.tasks.base import Examples, TaskData
from fedforget.tasks.text import MeanPooledEncoder, fixed_split, load_tokenizer, quiet_transformers
from fedforget.tasks.user_task import Task
from fedforget.tasks.vision_data import take_subset

TEXT_COLUMNS = ("text", "sentence")
IMAGE_COLUMNS = ("image", "img")
MAX_LENGTH = 128  # token cap for text data sets (also capped by the tokenizer's own model_max_length)
_ATTENTION_MARKERS = ("attention", "attn")


def is_timm_model(name: str) -> bool:
    return name.startswith(("timm/", "timm:"))


def timm_model_name(name: str) -> str:
    """``timm/<repo>`` → ``hf-hub:timm/<repo>``; ``timm:<anything>`` → ``<anything>`` for ``timm.create_model``."""
    if name.startswith("timm/"):
        return "hf-hub:" + name
    if name.startswith("timm:"):
        return name[len("timm:") :]
    raise ValueError(f"{name!r} is not a timm model name (expected 'timm/<repo>' or 'timm:<name>')")


def state_dict_sha256(module: nn.Module) -> str:
    """sha256 over the state dict in key order (name, dtype, shape and raw bytes of each tensor).

    A Hub model may be stored as several files or converted on load, so we hash what was loaded.
    """
    digest = hashlib.sha256()
    for key, tensor in module.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{key}|{t.dtype}|{tuple(t.shape)}\n".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


# -- data -------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def load_hf_splits(dataset: str) -> tuple[Any, Any]:
    """(train, test) ``datasets.Dataset`` in their original row order; test is a fixed 20% carve if absent."""
    from flwr_datasets import FederatedDataset
    from flwr_datasets.partitioner import IidPartitioner

    fds = FederatedDataset(dataset=dataset, partitioners={"train": IidPartitioner(num_partitions=1)}, shuffle=False)
    train = fds.load_split("train")
    try:
        test = fds.load_split("test")
    except ValueError:  # flwr-datasets raises ValueError for a split the data set lacks
        train_rows, test_rows = fixed_split(len(train), f"hf:{dataset}")
        train, test = train.select(train_rows), train.select(test_rows)
    return train, test


def _input_column(columns: list[str], requested: str, candidates: tuple[str, ...], dataset: str) -> str:
    if requested:
        if requested not in columns:
            raise ValueError(f"hf-input-column {requested!r} is not a column of {dataset!r}: {columns}")
        return requested
    for name in candidates:
        if name in columns:
            return name
    raise ValueError(f"cannot guess the input column of {dataset!r} (none of {candidates} in {columns}); "
                     "set run-config 'hf.input-column'")


def _label_map(train: Any, test: Any, column: str, dataset: str) -> dict[Any, int]:
    for split in (train, test):
        if column not in split.column_names:
            raise ValueError(f"hf-label-column {column!r} is not a column of {dataset!r}: {split.column_names}")
    values = sorted(set(train[column]) | set(test[column]))
    return {v: i for i, v in enumerate(values)}


def _tokenized(split: Any, column: str, model: str) -> tuple[torch.Tensor, ...]:
    tokenizer = load_tokenizer(model)
    max_length = min(MAX_LENGTH, int(getattr(tokenizer, "model_max_length", MAX_LENGTH) or MAX_LENGTH))
    enc = tokenizer([str(t) for t in split[column]], max_length=max_length, padding="max_length",
                    truncation=True, return_tensors="pt")
    return enc["input_ids"].to(torch.int64), enc["attention_mask"].to(torch.int64)


def _images(split: Any, column: str, model: str) -> tuple[torch.Tensor]:
    """RGB uint8 (N, 3, H, W): native size when all images share one, else resized to the model's input size.

    uint8 at native size keeps the pool small (CIFAR-sized sets stay 32x32); the backbone resizes and
    normalises per batch with timm's data config.
    """
    from PIL import Image

    images = [img.convert("RGB") for img in split[column]]
    sizes = {img.size for img in images}
    if len(sizes) > 1:
        _, height, width = timm_data_config(model)["input_size"]
        images = [img.resize((width, height), Image.Resampling.BICUBIC) for img in images]
    arrays = np.stack([np.asarray(img, dtype=np.uint8) for img in images]) if images else np.zeros((0, 1, 1, 3))
    return (torch.from_numpy(np.ascontiguousarray(arrays.transpose(0, 3, 1, 2))).to(torch.uint8),)


def _examples(split: Any, rows: np.ndarray, cfg: RunConfig, labels: dict[Any, int]) -> Examples:
    part = split.select(rows)
    if is_timm_model(cfg.hf.model):
        column = _input_column(part.column_names, cfg.hf.input_column, IMAGE_COLUMNS, cfg.hf.dataset)
        inputs = _images(part, column, cfg.hf.model)
    else:
        column = _input_column(part.column_names, cfg.hf.input_column, TEXT_COLUMNS, cfg.hf.dataset)
        inputs = _tokenized(part, column, cfg.hf.model)
    y = torch.tensor([labels[v] for v in part[cfg.hf.label_column]], dtype=torch.int64)
    return Examples(inputs, y, torch.from_numpy(rows.astype(np.int64)))


def _data(cfg: RunConfig) -> TaskData:
    if not (cfg.hf.dataset and cfg.hf.model):
        raise ValueError("task 'hf' needs run-config 'hf.dataset' and 'hf.model'")
    train, test = load_hf_splits(cfg.hf.dataset)
    labels = _label_map(train, test, cfg.hf.label_column, cfg.hf.dataset)
    name = f"hf:{cfg.hf.dataset}"
    return TaskData(
        train=_examples(train, take_subset(len(train), cfg.train_size, f"{name}-train"), cfg, labels),
        test=_examples(test, take_subset(len(test), cfg.test_size, f"{name}-test"), cfg, labels),
        num_classes=len(labels),
    )


# -- backbones --------------------------------------------------------------------------------------
@lru_cache(maxsize=4)
def timm_data_config(model: str) -> dict[str, Any]:
    """timm's preprocessing (input_size, interpolation, mean, std) for a model, without loading weights."""
    import timm

    net = timm.create_model(timm_model_name(model), pretrained=False, num_classes=0)
    return dict(timm.data.resolve_model_data_config(net))


class TimmImageEncoder(nn.Module):
    """uint8 RGB (N, 3, H, W) → pooled timm features; resizes and normalises as the model's data config says."""

    def __init__(self, net: nn.Module, data_config: dict[str, Any]) -> None:
        super().__init__()
        self.net = net
        self.feature_dim = int(net.num_features)
        self.size = tuple(int(s) for s in data_config["input_size"][1:])
        self.mode = "bicubic" if data_config.get("interpolation") == "bicubic" else "bilinear"
        self.register_buffer("mean", torch.tensor(data_config["mean"], dtype=torch.float32).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(data_config["std"], dtype=torch.float32).view(1, 3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float() / 255.0
        if tuple(x.shape[-2:]) != self.size:
            x = F.interpolate(x, size=self.size, mode=self.mode, align_corners=False).clamp_(0.0, 1.0)
        return self.net((x - self.mean) / self.std)


def timm_lora_targets(module: nn.Module) -> list[str]:
    """Full names of every ``nn.Linear`` and pointwise ungrouped ``nn.Conv2d`` (see the module docstring)."""
    names = []
    for name, sub in module.named_modules():
        if isinstance(sub, nn.Linear) or (
            isinstance(sub, nn.Conv2d) and sub.kernel_size == (1, 1) and sub.groups == 1
        ):
            names.append(name)
    return names


def transformer_lora_targets(module: nn.Module) -> list[str]:
    """Full names of the attention blocks' linear layers; all linear layers (but a pooler) if none is named so."""
    from transformers.pytorch_utils import Conv1D

    linear = [(n, m) for n, m in module.named_modules() if isinstance(m, (nn.Linear, Conv1D)) and "pooler" not in n]
    attention = [n for n, _ in linear if any(marker in n.lower() for marker in _ATTENTION_MARKERS)]
    return attention or [n for n, _ in linear]


def _timm_backbone(cfg: RunConfig) -> TimmImageEncoder:
    import timm

    net = timm.create_model(timm_model_name(cfg.hf.model), pretrained=True, num_classes=0)
    module = TimmImageEncoder(net, timm_data_config(cfg.hf.model)).eval()  # timm builds in train mode
    if not timm_lora_targets(module):
        raise ValueError(f"{cfg.hf.model!r} has no nn.Linear or 1x1 nn.Conv2d for LoRA")
    return module


def _transformers_backbone(cfg: RunConfig) -> MeanPooledEncoder:
    from transformers import AutoModel

    with quiet_transformers():
        transformer = AutoModel.from_pretrained(cfg.hf.model)
    module = MeanPooledEncoder(transformer, int(transformer.config.hidden_size)).eval()
    if not transformer_lora_targets(module):
        raise ValueError(f"{cfg.hf.model!r} has no linear layers for LoRA")
    return module


def _backbone(cfg: RunConfig) -> nn.Module:
    if not cfg.hf.model:
        raise ValueError("task 'hf' needs run-config 'hf.model'")
    return _timm_backbone(cfg) if is_timm_model(cfg.hf.model) else _transformers_backbone(cfg)


def _lora_targets(module: nn.Module) -> list[str]:
    return timm_lora_targets(module) if isinstance(module, TimmImageEncoder) else transformer_lora_targets(module)


def _weights_sha256(module: nn.Module) -> str:
    """The loaded network's own state dict, without the wrapper's buffers (timm) or pooling (transformers)."""
    return state_dict_sha256(module.net if isinstance(module, TimmImageEncoder) else module.transformer)


def _source(cfg: RunConfig) -> str:
    if is_timm_model(cfg.hf.model):
        return f"timm {cfg.hf.model}"
    return f"transformers {cfg.hf.model}, masked mean pooling"


#: Its model and data are the run config's (``hf.*``): the width, the LoRA targets and the classes are read from
#: them once loaded; no raw input form (``input_column=""``).
HF_GENERIC = Task("hf", backbone=_backbone, feature_dim=0, lora_targets=_lora_targets, num_classes=0,
                  input_column="", source=_source, data=_data, weights_sha256=_weights_sha256,
                  project_trained=False)
