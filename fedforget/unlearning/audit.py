"""``fedforget audit``: membership inference on forgotten vs held-out samples, before and after.

Two attacks on the served ensemble's outputs: the loss-threshold attack (a lower loss means
"member") and a shadow-model attack, a scikit-learn classifier trained on the model's outputs for
known members (retained training samples) against known non-members (one half of the test split),
then asked about the forgotten samples against the other half. "Before" is the store's serving
plan as first trained (every artifact at its first version); "after" is what is served now.
An AUC near 0.5 after forgetting means the forgotten samples look like data the model never saw.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from fedforget.core.chains import compute_serving
from fedforget.core.seeds import derive_seed
from fedforget.store import Store
from fedforget.store.ledger import LedgerUsageError

MAX_SAMPLES = 1000


def _features(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    p_true = np.clip(probs[np.arange(len(labels)), labels], 1e-12, 1.0)
    entropy = -(probs * np.log(np.clip(probs, 1e-12, 1.0))).sum(1)
    return np.stack([-np.log(p_true), probs.max(1), entropy], axis=1)


def _attack(cfg, num_classes, store, plan, serving, artifacts, data, forgotten, held, members, shadow_out):  # noqa: ANN001, ANN202
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    from fedforget.strategies.serve import serving_probabilities

    def feats(examples):  # noqa: ANN001, ANN202
        probs = serving_probabilities(cfg, num_classes, store, plan, serving, artifacts, examples.inputs)
        return _features(probs, examples.labels.numpy())

    f_forgot, f_held = feats(forgotten), feats(held)
    truth = np.r_[np.ones(len(f_forgot)), np.zeros(len(f_held))]
    loss_auc = float(roc_auc_score(truth, -np.r_[f_forgot[:, 0], f_held[:, 0]]))
    x_train = np.r_[feats(members), feats(shadow_out)]
    y_train = np.r_[np.ones(len(members.labels)), np.zeros(len(shadow_out.labels))]
    clf = LogisticRegression(max_iter=1000).fit(x_train, y_train)
    shadow_auc = float(roc_auc_score(truth, clf.predict_proba(np.r_[f_forgot, f_held])[:, 1]))
    return {"loss_threshold_auc": loss_auc, "shadow_auc": shadow_auc,
            "forgotten_mean_loss": float(f_forgot[:, 0].mean()), "held_out_mean_loss": float(f_held[:, 0].mean())}


def audit_store(store: Store) -> dict[str, Any]:
    from fedforget.tasks.registry import load_task_data
    from fedforget.unlearning.evaluate import stored_config

    cfg = stored_config(store)
    ledger = store.ledger()
    try:
        forgotten_ids = sorted(i for ids in ledger.forgotten_by_partition().values() for i in ids)
        plan = ledger.plan()
        artifacts = ledger.artifacts()
        now = ledger.serving()
        first = [{**a, "sha256": ledger.first_sha(a["artifact"]) or a["sha256"]} for a in artifacts]
    finally:
        ledger.close()
    if not forgotten_ids:
        raise LedgerUsageError("nothing has been forgotten in this store yet; run `fedforget forget` first")
    rng = random.Random(derive_seed(cfg.seed, "audit"))
    data = load_task_data(cfg)
    forgotten_ids = sorted(rng.sample(forgotten_ids, min(MAX_SAMPLES, len(forgotten_ids))))
    test_ids = data.test.ids.tolist()
    rng.shuffle(test_ids)
    half = len(test_ids) // 2
    n = min(len(forgotten_ids), half)
    held = data.test.by_ids(sorted(test_ids[:n]))
    shadow_out = data.test.by_ids(sorted(test_ids[half : half + min(half, MAX_SAMPLES)]))
    gone = set(forgotten_ids)
    retained = [i for i in data.train.ids.tolist() if i not in gone]
    members = data.train.by_ids(sorted(rng.sample(retained, min(len(shadow_out.labels), len(retained)))))
    forgotten = data.train.by_ids(forgotten_ids)
    before_serving = compute_serving(plan, {a["artifact"] for a in artifacts})
    common = (cfg, data.num_classes, store, plan)
    before = _attack(*common, before_serving, first, data, forgotten, held, members, shadow_out)
    after = _attack(*common, now, artifacts, data, forgotten, held, members, shadow_out) if now.get("available") \
        else None
    return {"forgotten": len(forgotten_ids), "held_out": n, "before": before, "after": after}
