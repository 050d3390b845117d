"""``fedforget audit``: membership inference on forgotten vs held-out samples, before and after.

Two attacks on the served ensemble's outputs: the loss-threshold attack (a lower loss means
"member") and a shadow-model attack, a scikit-learn classifier trained on the model's outputs for
known members (retained training samples) against known non-members (one half of the test split),
then asked about the forgotten samples against the other half. "Before" is measured by
``forget --audit-before`` on the model served just before the request (its files are purged by
the request); the ledger keeps only its decision, whether the samples were memorised, since the
losses and AUCs behind it are computed on the forgotten samples. "After" is what is served now,
measured on demand and never stored. Held out is the whole first half of the test split
(not one test sample per forgotten one), every AUC comes with a 95% bootstrap interval, and below
``MIN_FORGOTTEN`` forgotten samples the report says plainly that it cannot tell.
An AUC near 0.5 after forgetting means the forgotten samples look like data the model never saw.

The attacks need the forgotten and retained training rows, which the coordinator otherwise never reads:
the audit reads them from the task's public data set (its output says so, ``"reads"``), and refuses a
store whose nodes hold their own records, since no public file has those.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from fedforget.core.seeds import derive_seed
from fedforget.store import Store
from fedforget.store.ledger import LedgerUsageError
from fedforget.store.purge import AUDIT_KEY, audit_decision

MAX_SAMPLES = 1000
MAX_HELD_OUT = 5000
#: what the audit reads besides the store, stated in its output
READS = "public data set"
#: below this many forgotten samples the audit reports "too few forgotten samples to tell"
MIN_FORGOTTEN = 20
BOOTSTRAP = 200


def _features(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    p_true = np.clip(probs[np.arange(len(labels)), labels], 1e-12, 1.0)
    entropy = -(probs * np.log(np.clip(probs, 1e-12, 1.0))).sum(1)
    return np.stack([-np.log(p_true), probs.max(1), entropy], axis=1)


def _auc_with_ci(truth: np.ndarray, scores: np.ndarray, rng: np.random.Generator) -> tuple[float, list[float]]:
    """ROC AUC and its 95% bootstrap interval (members and non-members resampled separately)."""
    from sklearn.metrics import roc_auc_score

    pos, neg = scores[truth == 1], scores[truth == 0]
    auc = float(roc_auc_score(truth, scores))
    draws = []
    for _ in range(BOOTSTRAP):
        p, n = rng.choice(pos, len(pos)), rng.choice(neg, len(neg))
        draws.append(roc_auc_score(np.r_[np.ones(len(p)), np.zeros(len(n))], np.r_[p, n]))
    low, high = np.percentile(draws, [2.5, 97.5])
    return auc, [float(low), float(high)]


def _attack(cfg, num_classes, store, plan, serving, artifacts, forgotten, held, members, shadow_out, seed):  # noqa: ANN001, ANN202
    from sklearn.linear_model import LogisticRegression

    from fedforget.federation.serve import serving_probabilities

    def feats(examples):  # noqa: ANN001, ANN202
        probs = serving_probabilities(cfg, num_classes, store, plan, serving, artifacts, examples.inputs)
        return _features(probs, examples.labels.numpy())

    f_forgot, f_held = feats(forgotten), feats(held)
    truth = np.r_[np.ones(len(f_forgot)), np.zeros(len(f_held))]
    rng = np.random.default_rng(seed)
    loss_auc, loss_ci = _auc_with_ci(truth, -np.r_[f_forgot[:, 0], f_held[:, 0]], rng)
    x_train = np.r_[feats(members), feats(shadow_out)]
    y_train = np.r_[np.ones(len(members.labels)), np.zeros(len(shadow_out.labels))]
    clf = LogisticRegression(max_iter=1000).fit(x_train, y_train)
    shadow_auc, shadow_ci = _auc_with_ci(truth, clf.predict_proba(np.r_[f_forgot, f_held])[:, 1], rng)
    return {"loss_threshold_auc": loss_auc, "loss_threshold_ci95": loss_ci, "shadow_auc": shadow_auc,
            "shadow_ci95": shadow_ci, "forgotten_mean_loss": float(f_forgot[:, 0].mean()),
            "held_out_mean_loss": float(f_held[:, 0].mean())}


def _forgotten_ids(store: Store) -> list[int]:
    ledger = store.ledger()
    try:
        return sorted(i for ids in ledger.forgotten_by_partition().values() for i in ids)
    finally:
        ledger.close()


def audit_served(store: Store, serving: dict[str, Any], artifacts: list[dict[str, Any]],
                 forgotten_ids: list[int]) -> dict[str, Any]:
    """Both attacks on one served model: forgotten samples against one half of the test split (held
    out), the shadow model trained on retained members against the other half."""
    from fedforget.tasks.registry import load_task_data
    from fedforget.tasks.server_data import holds_local_records
    from fedforget.unlearning.evaluate import stored_config

    if holds_local_records(store.manifest()):
        raise LedgerUsageError("this store's nodes hold their own records and the coordinator holds no samples; "
                               "run the membership audit where the data is")
    cfg = stored_config(store)
    ledger = store.ledger()
    try:
        plan = ledger.plan()
    finally:
        ledger.close()
    rng = random.Random(derive_seed(cfg.seed, "audit"))
    data = load_task_data(cfg)
    forgotten_ids = sorted(rng.sample(forgotten_ids, min(MAX_SAMPLES, len(forgotten_ids))))
    test_ids = data.test.ids.tolist()
    rng.shuffle(test_ids)
    half = len(test_ids) // 2
    held = data.test.by_ids(sorted(test_ids[:half][:MAX_HELD_OUT]))
    shadow_out = data.test.by_ids(sorted(test_ids[half : half + min(half, MAX_SAMPLES)]))
    gone = set(forgotten_ids)
    retained = [i for i in data.train.ids.tolist() if i not in gone]
    members = data.train.by_ids(sorted(rng.sample(retained, min(len(shadow_out.labels), len(retained)))))
    forgotten = data.train.by_ids(forgotten_ids)
    out = {"reads": READS, "forgotten": len(forgotten_ids), "held_out": int(len(held.labels)),
           "verdict": None if len(forgotten_ids) >= MIN_FORGOTTEN else
           f"too few forgotten samples to tell (fewer than {MIN_FORGOTTEN}): the AUC's interval is too wide"}
    if not serving.get("available"):
        return {**out, "result": None}
    return {**out, "result": _attack(cfg, data.num_classes, store, plan, serving, artifacts, forgotten, held,
                                     members, shadow_out, derive_seed(cfg.seed, "audit-bootstrap"))}


def record_audit_before(store: Store, request: int, serving: dict[str, Any],
                        artifacts: list[dict[str, Any]]) -> dict[str, Any]:
    """``forget --audit-before``: audit the model served before ``request`` while its files still exist;
    keep its decision in the ledger and return the full measurement (never stored)."""
    measured = {"request": request, **audit_served(store, serving, artifacts, _forgotten_ids(store))}
    ledger = store.ledger()
    try:
        ledger.set_meta(AUDIT_KEY, audit_decision(measured))
    finally:
        ledger.close()
    return measured


def audit_store(store: Store) -> dict[str, Any]:
    """"After" is what is served now; "before" is what ``forget --audit-before`` measured at forget time
    (the models that saw the data are purged by the request, so it cannot be measured later)."""
    forgotten_ids = _forgotten_ids(store)
    if not forgotten_ids:
        raise LedgerUsageError("nothing has been forgotten in this store yet; run `fedforget forget` first")
    ledger = store.ledger()
    try:
        now, artifacts = ledger.serving(), ledger.artifacts()
        before = ledger.get_meta(AUDIT_KEY)
        before = before if isinstance(before, dict) and isinstance(before.get("request"), int) else None
        last = ledger.last_request()
    finally:
        ledger.close()
    after = audit_served(store, now, artifacts, forgotten_ids)
    note = None
    if before is None:
        note = "before: not measured; pass --audit-before to `fedforget forget` (the old models are purged)"
    elif before["request"] != last:
        note = f"before: measured at request #{before['request']}, on the samples forgotten up to it"
    return {"reads": READS, "forgotten": after["forgotten"], "held_out": after["held_out"], "verdict": after["verdict"],
            "before": audit_decision(before) if before else None,
            "before_request": before["request"] if before else None, "after": after["result"], "note": note}
