"""What a SAFE store serves: the mean logit of every valid adapter per class, mixed with prototypes.

``SAFE(z) = (1 − λ)·M(G)(z) + λ·Proto(z)`` with ``λ = exp(−d|S|/100)`` fixed by the plan (paper §7).
A class whose every adapter left the ensemble (instant forgetting) gets its prototype score mapped
onto the logits' scale in place of the missing mean logit (:func:`prototype_logits`), or no score at
all without prototypes.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedforget.core.config import RunConfig
from fedforget.methods.safe.adapters import PrototypeBank, normalised, predict_adapters
from fedforget.methods.safe.budget import adapter_budget
from fedforget.methods.safe.client import frozen_backbone, frozen_theta
from fedforget.methods.safe.features import cached_tokens
from fedforget.methods.safe.graph import SafePlan
from fedforget.store import Store

if TYPE_CHECKING:
    from fedforget.tasks.server_data import ServerTest

UNSCORED = -1e9


def test_tokens(cfg: RunConfig, store: Store) -> tuple[torch.Tensor, np.ndarray, torch.Tensor]:
    """Tokens, normalised pooled features and labels of the server's test set (cached in the store)."""
    from fedforget.tasks.server_data import load_server_test

    test = load_server_test(cfg)
    backbone = frozen_backbone(cfg.task, cfg.hf.model, cfg.seed)
    ids = test.examples.ids.tolist()
    tokens, pooled = cached_tokens(store.root, _tokens_kind(cfg, test), backbone.weights_sha256, ids,
                                   backbone.module, test.examples.inputs)
    return torch.from_numpy(tokens), normalised(torch.from_numpy(pooled)), test.examples.labels


def _tokens_kind(cfg: RunConfig, test: ServerTest) -> str:
    """The token cache's name: the task's, or for ``test-data`` (rows numbered 0..n-1 whatever they hold) one
    named by the rows' content, so tokens of other records are never read as these."""
    if not cfg.test_data:
        return f"test-{cfg.task}"
    digest = hashlib.sha256()
    for t in (*test.examples.inputs, test.examples.labels):
        digest.update(f"{t.dtype}|{tuple(t.shape)}\n".encode())
        digest.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return f"test-data-{digest.hexdigest()[:16]}"


def prototype_bank(plan: SafePlan, store: Store, shas: dict[str, str], served: list[str], dim: int) -> PrototypeBank:
    """Class sums over the served cells, added in sorted artifact order (deterministic)."""
    bank = PrototypeBank(plan.num_classes, dim)
    for aid in sorted(a for a in served if "/proto/" in a):
        arrays = store.get_arrays(shas[aid])
        bank.add(int(arrays["label"][0]), arrays["sum"], int(arrays["count"][0]))
    return bank


def safe_scores(cfg: RunConfig, store: Store, plan_json: dict[str, Any], serving: dict[str, Any],
                artifacts: list[dict[str, Any]], tokens: torch.Tensor, features: np.ndarray) -> np.ndarray:
    """(N, K) scores of the served ensemble (argmax = prediction)."""
    plan = SafePlan.from_json(plan_json)
    shas = {a["artifact"]: a["sha256"] for a in artifacts}
    served = list(serving["artifacts"])
    theta = frozen_theta(int(tokens.shape[-1]), cfg.seed, adapter_budget(cfg).width)
    n, k = len(tokens), plan.num_classes
    total, votes = np.zeros((n, k)), np.zeros(k)
    for aid in sorted(a for a in served if "/proto/" not in a):
        arrays = store.get_arrays(shas[aid])
        params = {name: torch.from_numpy(np.array(arrays[name], copy=True)) for name in ("queries", "heads", "bias")}
        logits = predict_adapters(theta, params, tokens)
        for column, label in enumerate(arrays["classes"].tolist()):
            total[:, label] += logits[:, column]
            votes[label] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        ensemble = np.where(votes > 0, total / np.maximum(votes, 1), np.nan)
    if not plan.prototypes:
        return np.where(np.isnan(ensemble), UNSCORED, ensemble)
    bank = prototype_bank(plan, store, shas, served, features.shape[1])
    proto = np.where(bank.counts > 0, bank.scores(features), np.nan)
    return mix_scores(ensemble, proto, plan.lam)


def prototype_logits(ensemble: np.ndarray, proto: np.ndarray) -> np.ndarray:
    """The ensemble's logits, with each class that has no adapter filled in from its prototype score.

    Per sample, the cosine scores are mapped affinely onto the logit scale so that, over the classes that
    do have adapters, they have the logits' mean and spread; a class with no adapter then competes with
    the others on the logits' own scale (instant forgetting). Uses the sample's own scores only.
    """
    have = ~np.isnan(ensemble) & ~np.isnan(proto)
    count = have.sum(axis=1)
    e, c = np.where(have, ensemble, 0.0), np.where(have, proto, 0.0)
    n = np.maximum(count, 1)
    e_mean, c_mean = e.sum(1) / n, c.sum(1) / n
    e_std = np.sqrt(np.where(have, (ensemble - e_mean[:, None]) ** 2, 0.0).sum(1) / n)
    c_std = np.sqrt(np.where(have, (proto - c_mean[:, None]) ** 2, 0.0).sum(1) / n)
    fit = (count > 1) & (c_std > 0) & (e_std > 0)
    slope = np.where(fit, e_std / np.where(fit, c_std, 1.0), 1.0)
    fill = e_mean[:, None] + slope[:, None] * (proto - c_mean[:, None])
    missing = np.isnan(ensemble) & ~np.isnan(proto) & (count > 0)[:, None]
    return np.where(missing, fill, ensemble)


def mix_scores(ensemble: np.ndarray, proto: np.ndarray, lam: float) -> np.ndarray:
    """``(1 − λ)·logits + λ·Proto`` per class; a class scored by neither (no samples left) never wins."""
    logits = prototype_logits(ensemble, proto)
    mixed = np.where(np.isnan(logits), lam * proto, (1 - lam) * logits + lam * np.nan_to_num(proto, nan=-1.0))
    return np.where(np.isnan(mixed), UNSCORED, mixed)


def safe_probabilities(cfg: RunConfig, store: Store, plan_json: dict[str, Any], serving: dict[str, Any],
                       artifacts: list[dict[str, Any]], inputs: tuple[torch.Tensor, ...] | None = None,
                       ) -> tuple[np.ndarray, torch.Tensor | None]:
    """Softmax of the scores on ``inputs`` (default: the test split, with its labels)."""
    labels = None
    if inputs is None:
        tokens, features, labels = test_tokens(cfg, store)
    else:
        from fedforget.methods.safe.features import compute_tokens

        raw, pooled = compute_tokens(frozen_backbone(cfg.task, cfg.hf.model, cfg.seed).module, inputs)
        tokens, features = torch.from_numpy(raw), normalised(torch.from_numpy(pooled))
    scores = safe_scores(cfg, store, plan_json, serving, artifacts, tokens, features)
    return torch.softmax(torch.from_numpy(scores), dim=1).numpy(), labels


def served_probabilities(cfg: RunConfig, num_classes: int, store: Store, plan_json: dict[str, Any],
                         serving: dict[str, Any], artifacts: list[dict[str, Any]],
                         inputs: tuple[torch.Tensor, ...]) -> np.ndarray:
    """SAFE's serving function in the registry's common signature (``num_classes`` is not needed)."""
    return safe_probabilities(cfg, store, plan_json, serving, artifacts, inputs)[0]


def safe_accuracy(cfg: RunConfig, store: Store, plan_json: dict[str, Any], serving: dict[str, Any],
                  artifacts: list[dict[str, Any]]) -> dict[str, float]:
    """Accuracy and loss of the served ensemble on the test split, and the task's own metric values."""
    from fedforget.federation.serve import probability_metrics
    from fedforget.tasks.task_functions import task_metric, task_prediction

    probs, labels = safe_probabilities(cfg, store, plan_json, serving, artifacts)
    assert labels is not None
    return probability_metrics(probs, labels, task_metric(cfg), task_prediction(cfg))
