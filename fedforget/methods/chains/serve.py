"""What a chains store serves: per shard the selected prefixes mixed as softmax probabilities with the
plan's weights (FedSGT AllSeq/MinSeq/LongSeq), then shards averaged with their votes (S3T, SISA, FedCIO)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from fedforget.core.config import RunConfig
from fedforget.federation.module_stack import Module, assemble, split_state
from fedforget.federation.serve import ServingError, class_probabilities, load_tensors
from fedforget.methods.chains.plan import ChainPlan, shard_vote_weights
from fedforget.store import Store
from fedforget.training.supervised import predict_logits


def member_model(cfg: RunConfig, num_classes: int, plan: ChainPlan, store: Store, shas: Mapping[str, str],
                 artifacts: list[str], metas: Mapping[str, dict[str, Any]]):  # noqa: ANN201
    """The network of one served chain prefix, built from its stored artifacts."""
    modules, head = [], {}
    for artifact in artifacts:
        lora, head = split_state(load_tensors(store, shas[artifact]))
        meta = metas.get(artifact, {})
        modules.append(Module(str(meta.get("slot", "default")), meta.get("targets"), lora))
    return assemble(cfg, num_classes, plan.stacking, modules, head)


def chain_probabilities(cfg: RunConfig, num_classes: int, store: Store, plan_json: dict[str, Any],
                        serving: dict[str, Any], artifacts: list[dict[str, Any]],
                        inputs: tuple[torch.Tensor, ...]) -> np.ndarray:
    """The served ensemble's class probabilities on ``inputs``."""
    shas = {a["artifact"]: a["sha256"] for a in artifacts}
    metas = {a["artifact"]: a["meta"] for a in artifacts}
    kinds = {a["kind"] for a in artifacts if a["artifact"] in serving["artifacts"]}
    if kinds - {"lora+head"}:
        raise ServingError(f"evaluate rebuilds LoRA + head models only, not {', '.join(sorted(kinds))}; "
                           "`fedforget status` shows the accuracy the run measured")
    plan = ChainPlan.from_json(plan_json)
    votes = shard_vote_weights(plan_json, serving, metas)
    mixtures = []
    for shard in serving["shards"]:
        if not shard["members"]:
            continue
        mix = None
        for member in shard["members"]:
            model = member_model(cfg, num_classes, plan, store, shas, member["artifacts"], metas)
            probs = member["weight"] * class_probabilities(predict_logits(model, inputs))
            mix = probs if mix is None else mix + probs
        mixtures.append(mix)
    return np.sum(np.stack([w * m for w, m in zip(votes, mixtures, strict=True)]), axis=0)
