"""Let PyPI's CUDA-built torchvision import next to the CPU build of torch.

torchvision 0.28.0 on PyPI is a CUDA build whose ``_C.so`` cannot load with the CPU torch; its
``_meta_registrations`` then fails on the missing ``torchvision::nms`` schema, and with it every
import of transformers, peft and timm. This hook defines the two op schemas it needs (compiled ops
such as ``nms`` stay unavailable, which image classification never uses). The setup script
installs it into the venv's site-packages with a ``.pth`` file, so every interpreter of the venv
(Ray workers and Flower's app processes included) gets it; product code never imports it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

_LIBRARY = None
_BUSY = False


def install() -> None:
    """Define the op schemas, unless torchvision's own ``_C.so`` loads (then do nothing)."""
    global _LIBRARY, _BUSY
    if _LIBRARY is not None or _BUSY:
        return
    _BUSY = True
    try:
        spec = importlib.util.find_spec("torchvision")
        if spec is None or not spec.submodule_search_locations:
            return
        import torch

        try:
            torch.ops.load_library(os.path.join(list(spec.submodule_search_locations)[0], "_C.so"))
            return
        except (OSError, ImportError, RuntimeError):
            pass
        _LIBRARY = torch.library.Library("torchvision", "DEF")
        _LIBRARY.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _LIBRARY.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    finally:
        _BUSY = False


class _TorchvisionHook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, D102
        if name == "torchvision" and not _BUSY:
            sys.meta_path.remove(self)
            install()
        return None


def install_hook() -> None:
    """Run :func:`install` the first time anything imports torchvision."""
    if "torchvision" not in sys.modules:
        sys.meta_path.insert(0, _TorchvisionHook())
