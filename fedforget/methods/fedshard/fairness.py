"""``fedforget fairness``: FedShard's M_e and M_p for the requests so far.

* Z_c, a client's unlearning cost if it asked to leave, is counted on the stored tree in
  client-rounds (and as 100·Z_c/Z_avg, unit-free); M_e weights its spread by the client's |α_c|.
* α_c is the angle of the client's first local update from θ^0 against the mean of all clients'
  (measured during training, the same reference for every method).
* ΔY_c is the accuracy drop on client c's data distribution from the first model served to the one
  served now: the test split's per-class accuracy weighted by the client's label histogram, so it
  is measured on held-out data without any client taking part.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedforget.cli_kit.errors import UsageError
from fedforget.core.config import RunConfig, parse_run_config, stored_run_config
from fedforget.store import Store


def per_class_accuracy(probs: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    hit = probs.argmax(1) == labels
    return np.array([hit[labels == k].mean() if (labels == k).any() else 0.0 for k in range(num_classes)])


def client_label_shares(manifest: dict[str, Any], data, clients: list[int]) -> dict[int, np.ndarray]:  # noqa: ANN001
    """Each client's label histogram (as shares) over its training partition."""
    out = {}
    for c in clients:
        ids = [i for s in manifest["partitions"][str(c)] for i in s]
        hist = np.bincount(data.train.by_ids(ids).labels.numpy(), minlength=data.num_classes).astype(float)
        out[c] = hist / max(1.0, hist.sum())
    return out


def stored_label_shares(manifest: dict[str, Any], num_classes: int, clients: list[int]) -> dict[int, np.ndarray] | None:
    """Each client's label shares from the counts its node reported at registration (manifest ``class-counts``);
    None when the store predates them."""
    counts = manifest.get("class-counts")
    if counts is None:
        return None
    out = {}
    for c in clients:
        row = counts.get(str(c)) if isinstance(counts, dict) else None
        if not (isinstance(row, list) and len(row) == num_classes
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in row)):
            raise UsageError(f"the manifest's class-counts of client {c} is not {num_classes} counts; the store is "
                             "damaged")
        hist = np.asarray(row, dtype=float)
        out[c] = hist / max(1.0, hist.sum())
    return out


def label_shares(manifest: dict[str, Any], cfg: RunConfig, num_classes: int,
                 clients: list[int]) -> dict[int, np.ndarray]:
    """The clients' label shares: as their nodes reported them, else (a store from before the reports, whose
    nodes hold the task's public records) counted on the public data set."""
    from fedforget.tasks.server_data import holds_local_records

    shares = stored_label_shares(manifest, num_classes, clients)
    if shares is not None:
        return shares
    if holds_local_records(manifest):
        raise UsageError("this store records no class-counts and its nodes hold their own records, which the "
                         "coordinator never reads; train it again to have the nodes report their label counts")
    from fedforget.tasks.registry import load_task_data

    return client_label_shares(manifest, load_task_data(cfg), clients)


def accuracy_drops(shares: dict[int, np.ndarray], before: np.ndarray, after: np.ndarray) -> dict[int, float]:
    """ΔY_c: per-class accuracy before − after, weighted by client c's label shares."""
    return {c: float(h @ (before - after)) for c, h in shares.items()}


def fairness_of_store(store: Store) -> dict[str, Any]:
    from fedforget.federation.serve import serving_probabilities
    from fedforget.methods.fedshard.costs import MP_EPSILON, client_costs, fairness_report, training_cost
    from fedforget.methods.fedshard.plan import ShardTree
    from fedforget.tasks.server_data import load_server_test

    manifest = store.manifest()
    plan = manifest.get("plan") or {}
    if plan.get("kind") != "fedshard":
        raise UsageError(f"fairness metrics are FedShard's; {store.root} was trained with method "
                         f"{manifest.get('method')!r} (train one with method='fedshard')")
    tree = ShardTree.from_json(plan)
    ledger = store.ledger()
    try:
        angles = {int(c): float(a) for c, a in (ledger.get_meta("client-angles") or {}).items()}
        leavers = ledger.exhausted_partitions()
        artifacts = ledger.artifacts()
        serving = ledger.serving()
        plan_json = ledger.plan()
        root = tree.root.artifact
        first = {"kind": "fedshard", "available": True, "artifacts": [root]}
        first_sha = ledger.first_sha(root)
        frozen = {int(c): float(d) for c, d in (ledger.get_meta("leaver-min-distances") or {}).items()}
        first_per_class = ledger.get_meta("first-per-class-accuracy")
    finally:
        ledger.close()
    scrubbed = sorted(c for c in leavers if c not in angles)  # a leaver's angle is purged with its data
    if len(angles) + len(scrubbed) != tree.num_clients or (scrubbed and not frozen):
        raise UsageError("this store has no per-client angles (trained before they were recorded); train it again")
    # M_e over the clients whose angle is still held (all of them until a client leaves)
    report = fairness_report(tree, {**angles, **{c: 1.0 for c in scrubbed}}, leavers, eps0=MP_EPSILON)
    if scrubbed:
        report["me-note"] = f"leavers {scrubbed}: their angles were purged; M_e weights them by 1"
    retrains = [m for m in store.metrics() if m.get("final") and m.get("action") == "retrain"]
    report.update({"method": "fedshard", "clients": tree.num_clients, "stages": len(tree.stages),
                   "training-client-rounds": training_cost(tree), "client-costs": client_costs(tree),
                   "requests": [{"rebuilt": len(m.get("rebuilt", [])), "client-rounds": m.get("client-rounds"),
                                 "watermark": m.get("watermark")} for m in retrains]})
    if not leavers or not serving.get("available"):
        report["mp"] = None
        report["mp-note"] = "no client has left yet" if not leavers else "nothing is served; run `fedforget retrain`"
        return report
    cfg = parse_run_config(stored_run_config(manifest["config"]))
    test = load_server_test(cfg)
    if test.examples.sequence_targets is not None:
        report["mp"] = None
        report["mp-note"] = "a sequence task's model predicts per position: it has no per-class accuracy"
        return report
    num_classes = test.num_classes
    inputs, labels = test.examples.inputs, test.examples.labels.numpy()
    if first_per_class is not None:  # measured by training: the first model's bytes are purged by a leave
        before = np.asarray(first_per_class, dtype=np.float64)
    elif first_sha and store.verify_artifact(first_sha):
        before_rows = [dict(a, sha256=first_sha) if a["artifact"] == root else a for a in artifacts]
        before = per_class_accuracy(serving_probabilities(cfg, num_classes, store, plan_json, first,
                                                           before_rows, inputs), labels, num_classes)
    else:
        report["mp"] = None
        report["mp-note"] = "the first served model was purged and its accuracy was not recorded; train again"
        return report
    after = per_class_accuracy(serving_probabilities(cfg, num_classes, store, plan_json, serving, artifacts,
                                                      inputs), labels, num_classes)
    delta = accuracy_drops(label_shares(manifest, cfg, num_classes, sorted({*angles, *scrubbed})), before, after)
    if scrubbed:
        from fedforget.methods.fedshard.costs import performance_fairness

        mp = performance_fairness(delta, {c: frozen.get(c, 0.0) for c in delta}, MP_EPSILON)
    else:
        mp = fairness_report(tree, angles, leavers, delta, eps0=MP_EPSILON)["mp"]
    report.update({"mp": mp, "delta-accuracy": delta})
    return report
