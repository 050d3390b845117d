"""What a split store serves (``hosfl``, ``sfl``, ``zo-sfl``): its one stored [θ_c; θ_s], as one model.

The serving function of plan kind ``split``. It rebuilds the model from the stored bytes only, so
``evaluate``, ``audit`` and ``verify`` measure exactly what a user is served, the same way they
measure every other method's served model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedforget.core.config import RunConfig
from fedforget.federation.serve import ServingError, class_probabilities
from fedforget.methods.hosfl.split_model import Composite, cached_split_model
from fedforget.store import Store
from fedforget.training.supervised import predict_logits

SPLIT_KIND = "split-lora+head"


def split_probabilities(cfg: RunConfig, num_classes: int, store: Store, plan_json: dict[str, Any],
                        serving: dict[str, Any], artifacts: list[dict[str, Any]],
                        inputs: tuple[torch.Tensor, ...]) -> np.ndarray:
    """Class probabilities of the served split model on ``inputs``."""
    stored = {a["artifact"]: a for a in artifacts}
    served = [stored[a] for a in serving["artifacts"] if a in stored]
    if len(served) != 1 or served[0]["kind"] != SPLIT_KIND:
        raise ServingError(f"a split store serves one {SPLIT_KIND} artifact, not "
                           f"{', '.join(sorted(a['kind'] for a in served)) or 'none'}")
    split = cached_split_model(cfg, num_classes, "server")
    split.load_artifact(store.get_arrays(served[0]["sha256"]))
    return class_probabilities(predict_logits(Composite(split), inputs))
