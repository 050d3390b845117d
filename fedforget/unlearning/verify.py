"""``fedforget verify``: train from scratch on the remaining data and compare what is served, bit for bit.

The scratch run is the same method, config, seed and plan (groups, sequences, clusters are drawn
from the seed and the original partition plan), executed by the real ServerApp and
ClientApp objects on an in-process Grid whose clients hold tombstones for every forgotten sample: those of
the Flower app that trained the store (a user's app its manifest records, loaded from that app's
``[tool.flwr.app.components]`` with ``reference=true``, as ``verify --federation`` submits it), else fedforget's own.
What is forgotten is resolved from the fingerprinted manifest's plan and each request's recorded spec
(:mod:`fedforget.store.forget_plan`), never read off the ledger's sample index, which is derived and is
what ``forget`` itself trusted: the index is compared with the manifest instead (``index``), so a sample
moved to another unit before its forget fails the check rather than passing it on both sides.
A method whose plan was drawn from what a leaver influenced readies its scratch run itself (its
declaration's ``prepare_scratch``, e.g. a stored tree replayed as ``plan-file``): "from scratch" means
"on the same plan". A store whose training started from initial arrays (``start(initial_arrays=...)``,
:mod:`fedforget.store.initial_arrays`) has its reference start from the same recorded arrays (a user's app
that hands arrays in code must hand those, else its reference run is refused in one line).

What is compared is what a user is served, never only what the ledger says about it:

* **index** — the ledger's sample index against the manifest's plan and the requests' specs
  (:func:`fedforget.store.index_check.index_problems`): a disagreement is named and fails the check;
* **files** — every served artifact's file is re-hashed; a missing or corrupt one fails the check
  and is named (the ledger's sha256 alone proves nothing about the bytes on disk);
* **artifacts** — each served artifact's sha256 against the scratch run's artifact of the same id;
* **serving plan** — the stored plan (members, prefixes, weights) against the plan recomputed from
  the valid artifacts, and, once every request is retrained, against the scratch run's own plan;
* **server-held samples** (a method that declares ``held_samples``, under the report key it names) — the
  ids the store recorded against those the scratch run draws from the seed (a retrain trains on the recorded ones);
* **outputs** — the served model's class probabilities on the whole test split against those of the
  same plan built from the scratch run's artifacts, with ``numpy.array_equal`` (bit for bit); not compared (and
  said why) for a server without a test set of its own, whose nodes evaluate what is served: the files are.

DP adapters (a method that declares ``dp_exposure``) are compared too when the verifier plays their nodes
(simulation: it copies each node's DP secret into the scratch run's node). Served DP adapters it cannot check
are named in ``not_checked`` with why: ``dp_covered`` (they carry forgotten samples under DP) and
``dp_unreproducible`` (a node that trained them keeps its secret elsewhere).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedforget.core.method import HeldSamples
from fedforget.core.record_ids import LOCAL_RECORDS
from fedforget.methods.registry import store_method
from fedforget.store import Store, StoreError
from fedforget.store.forget_plan import PlanError, resolve_requests, sample_plan
from fedforget.store.index_check import index_problems
from fedforget.store.initial_arrays import recorded_initial_arrays
from fedforget.store.ledger import LedgerUsageError
from fedforget.unlearning.reference_app import load_components, reference_app

#: How a reference run is made: (store, a work dir, partition → forgotten ids) → (the scratch store, the
#: partitions whose DP secret the reference did not hold).
Reference = Callable[[Store, Path, dict[int, list[int]]], tuple[Store, set[int]]]


class NeedsFederation(LedgerUsageError):
    """The store's nodes hold their own records, which an in-process reference run cannot read."""


def local_nodes(manifest: dict[str, Any]) -> list[str]:
    """The names of the store's nodes that hold their own records (the manifest's ``nodes``)."""
    nodes = manifest.get("nodes")
    if not isinstance(nodes, dict):
        return []
    return sorted(str(v.get("name")) for v in nodes.values()
                  if isinstance(v, dict) and v.get("records") == LOCAL_RECORDS)


def served_file_problems(store: Store, shas: dict[str, str], served: set[str]) -> list[dict[str, str]]:
    """Each served artifact whose file is missing, or whose bytes no longer hash to its recorded sha256."""
    problems = []
    for artifact in sorted(served):
        sha = shas.get(artifact)
        if sha is None:
            problems.append({"artifact": artifact, "sha256": "", "problem": "not recorded in the ledger"})
        elif not store.artifact_path(sha).is_file():
            problems.append({"artifact": artifact, "sha256": sha, "problem": "missing"})
        elif not store.verify_artifact(sha):
            problems.append({"artifact": artifact, "sha256": sha, "problem": "corrupt"})
    return problems


def served_outputs(store: Store, serving: dict[str, Any], plan: dict[str, Any],
                   artifacts: list[dict[str, Any]]) -> tuple[Any, str | None]:
    """The served model's class probabilities on the server's test set, or (None, why they cannot be computed)."""
    from fedforget.federation.serve import ServingError, serving_probabilities
    from fedforget.tasks.server_data import ServerTestError, load_server_test
    from fedforget.unlearning.evaluate import stored_config

    cfg = stored_config(store)
    try:
        test = load_server_test(cfg)
    except ServerTestError:  # the nodes evaluate what is served (evaluate-on-nodes): the artifacts are compared
        return None, "the server holds no test set (the nodes evaluate what is served); the served files are compared"
    try:
        return serving_probabilities(cfg, test.num_classes, store, plan, serving, artifacts, test.examples.inputs), None
    except ServingError as exc:
        return None, str(exc)


def compare_outputs(store: Store, scratch: Store, plan: dict[str, Any], stored: dict[str, Any],
                    expected: dict[str, Any], ours: list[dict[str, Any]],
                    theirs: list[dict[str, Any]]) -> dict[str, Any]:
    """Our stored plan over our files vs the recomputed plan over the scratch run's files, bit for bit."""
    import numpy as np

    mine, why = served_outputs(store, stored, plan, ours)
    if mine is None:
        return {"compared": False, "equal": None, "reason": why}
    reference, why = served_outputs(scratch, expected, plan, theirs)
    if reference is None:
        return {"compared": False, "equal": None, "reason": f"the scratch run cannot serve this plan: {why}"}
    equal = mine.shape == reference.shape and bool(np.array_equal(mine, reference))
    diff = float(np.abs(mine - reference).max()) if mine.shape == reference.shape else float("inf")
    return {"compared": True, "equal": equal, "examples": int(mine.shape[0]), "max_abs_diff": diff,
            "reason": None}


def refuse_in_process(manifest: dict[str, Any]) -> None:
    """An in-process reference plays every node here, so it needs the public set; nodes' own records it cannot read."""
    local = local_nodes(manifest)
    if local:
        raise NeedsFederation(f"node(s) {', '.join(local[:3])}{', …' if len(local) > 3 else ''} hold their own "
                              "records, which this process cannot read; verify through the nodes with "
                              "`fedforget verify --federation NAME`")


def _scratch_run(store: Store, workdir: Path, forgotten: dict[int, list[int]]) -> tuple[Store, set[int]]:
    """The reference in process: every node played here, holding tombstones for what is forgotten; the app that
    trained the store (:mod:`fedforget.unlearning.reference_app`) runs it with ``reference=true``."""
    refuse_in_process(store.manifest())
    from fedforget.federation.client_site import dataset_key
    from fedforget.federation.starting_model import reference_of
    from fedforget.inprocess import run_in_process
    from fedforget.store.tombstones import add_tombstones
    from fedforget.unlearning.evaluate import stored_config

    cfg = stored_config(store)
    manifest = store.manifest()
    scratch_root = workdir / "scratch"
    for partition, ids in forgotten.items():
        add_tombstones(scratch_root / "clients" / str(partition), dataset_key(cfg), ids)
    config = {**cfg.to_dict(), "store": str(scratch_root), "action": "train"}
    method = store_method(manifest)
    secretless: set[int] = set()
    if method is not None and method.prepare_scratch:  # what the method's scratch run needs besides the config
        secretless = method.prepare_scratch(store, cfg, scratch_root, workdir, config)
    app = reference_app(store)
    if app is not None:  # the user's app that trained the store, as `verify --federation` submits it
        server_app, client_app = load_components(app)
        with reference_of(store.root, scratch_root):  # it starts from the store's recorded initial arrays, if any
            run_in_process({**config, "reference": True}, int(manifest["num-partitions"]), server_app=server_app,
                           client_app=client_app)
        return Store.open(scratch_root), secretless
    initial = recorded_initial_arrays(store)  # the store's training started from these: so does the reference
    run_in_process(config, int(manifest["num-partitions"]),
                   server_app=starting_from(initial) if initial is not None else None)
    return Store.open(scratch_root), secretless


def starting_from(arrays: dict[str, Any]) -> Any:  # noqa: ANN401 - a flwr ServerApp
    """fedforget's ServerApp whose training run starts from ``arrays`` (``start(initial_arrays=...)``), as the
    verified store's training did."""
    from flwr.app import Array, ArrayRecord, Context
    from flwr.serverapp import Grid, ServerApp

    from fedforget.strategies import strategy_for

    record = ArrayRecord({name: Array(value) for name, value in arrays.items()})
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy_for(context.run_config).start(grid=grid, initial_arrays=record, action="train")

    return app


def forgotten_from_manifest(manifest: dict[str, Any], specs: list[tuple[int, Any]]) -> dict[int, list[int]]:
    """Partition → the sample ids its clients must not train on in the reference run: every request's spec
    resolved against the manifest's plan (a server-held id is never among them)."""
    try:
        plan = sample_plan(manifest)
        if plan is None:
            raise PlanError("the manifest holds no partition plan; the store was never trained")
        return resolve_requests(plan, specs).by_partition(plan)
    except PlanError as exc:
        raise StoreError(f"the store is not what it claims: verify cannot resolve what is forgotten ({exc})") from None


def verify_store(store: Store, include_all: bool = False, workdir: Path | None = None,
                 reference: Reference | None = None) -> dict[str, Any]:
    """Compare what ``store`` serves with a from-scratch reference run, bit for bit (``reference``: how that run
    is made; in process by default, through the nodes with :mod:`fedforget.unlearning.verify_federation`)."""
    from fedforget.core.serving_plans import compute_serving

    manifest = store.manifest()
    if reference is None:  # before any work
        refuse_in_process(manifest)
        reference_app(store)
    method = store_method(manifest)

    ledger = store.ledger()
    try:
        with ledger.snapshot():  # the specs and the index of one moment
            specs = ledger.request_specs()
            index = index_problems(ledger.db, manifest)
        forgotten = forgotten_from_manifest(manifest, specs)
        artifacts = ledger.artifacts()
        serving = ledger.serving()
        plan = ledger.plan() or {}
        valid = ledger.valid_artifacts()
        all_retrained = ledger.retrained_watermark() >= ledger.last_request()
        dp_covered: set[str] = set()
        dp_nodes: dict[str, set[int]] = {}
        if method is not None and method.dp_exposure:  # adapters that carry forgotten samples under DP only
            dp_covered, dp_nodes = method.dp_exposure(ledger)
    finally:
        ledger.close()
    served = set(serving.get("artifacts", []))
    shas = {a["artifact"]: a["sha256"] for a in artifacts}
    files = served_file_problems(store, shas, served)
    expected = json.loads(json.dumps(compute_serving(plan, valid) if plan else {"available": False, "artifacts": []}))
    with tempfile.TemporaryDirectory(prefix="fedforget-verify-", dir=workdir) as tmp:
        scratch, secretless = (reference or _scratch_run)(store, Path(tmp), forgotten)
        other = scratch.ledger()
        try:
            scratch_artifacts = other.artifacts()
            scratch_serving = other.serving()
        finally:
            other.close()
        scratch_shas = {a["artifact"]: a["sha256"] for a in scratch_artifacts}
        kept = method.held_samples if method is not None else None
        kept_check = compare_held_samples(kept, store, scratch) if kept is not None else None
        held = compare_held(manifest, scratch.manifest()) if reference is not None else None
        dp_unreproducible = {a for a, nodes in dp_nodes.items() if nodes & secretless} - dp_covered
        unchecked = dp_covered | dp_unreproducible
        dp_served = sorted(served & unchecked)
        if files:
            outputs = {"compared": False, "equal": None, "reason": "a served file is missing or corrupt"}
        elif dp_served:
            outputs = {"compared": False, "equal": None,
                       "reason": f"served DP adapters cannot be reproduced: {', '.join(dp_served)}"}
        elif not served:
            outputs = {"compared": False, "equal": None, "reason": "nothing is served"}
        else:
            outputs = compare_outputs(store, scratch, plan, serving, expected, artifacts, scratch_artifacts)
    compared = []
    for a in artifacts:
        if not include_all and a["artifact"] not in served:
            continue
        theirs = scratch_shas.get(a["artifact"])
        compared.append({"artifact": a["artifact"], "served": a["artifact"] in served, "valid": a["valid"],
                         "sha256": a["sha256"], "scratch_sha256": theirs, "equal": theirs == a["sha256"],
                         "dp_covered": a["artifact"] in dp_covered,
                         "dp_unreproducible": a["artifact"] in dp_unreproducible})
    served_rows = [c for c in compared if c["served"] and not c["dp_covered"] and not c["dp_unreproducible"]]
    plan_check = {"equal_recomputed": serving == expected,
                  "equal_scratch": serving == scratch_serving if all_retrained else None}
    plan_ok = plan_check["equal_recomputed"] and plan_check["equal_scratch"] is not False
    outputs_ok = outputs["equal"] is not False
    exact = (bool(served_rows) and all(c["equal"] for c in served_rows) and not files and plan_ok and outputs_ok
             and (kept_check is None or kept_check["equal"]) and not index and (held is None or held["equal"]))
    return {
        "exact": exact,
        "served": len(served_rows),
        "served_equal": sum(c["equal"] for c in served_rows),
        "forgotten_samples": sum(len(v) for v in forgotten.values()),
        "dp_covered": sorted(c["artifact"] for c in compared if c["served"] and c["dp_covered"]),
        "dp_unreproducible": sorted(c["artifact"] for c in compared if c["served"] and c["dp_unreproducible"]),
        "not_checked": _not_checked(compared),
        "index": index,
        "files": files,
        "serving_plan": plan_check,
        "outputs": outputs,
        **({kept.report: kept_check} if kept is not None else {}),
        "held": held,
        "compared": compared,
        "reason": index[0] if index else (held["reason"] if held and not held["equal"] else
                                         _reason(served_rows, files, plan_check, outputs, kept_check, kept)),
    }


def compare_held(manifest: dict[str, Any], scratch: dict[str, Any]) -> dict[str, Any]:
    """A reference trained by the nodes: they registered the same names and the same plan (deleted records
    included) as the store was trained from, else the reference is of other data."""
    names = manifest.get("nodes") == scratch.get("nodes") or (manifest.get("nodes") is None)
    plan = manifest.get("partitions") == scratch.get("partitions")
    reason = None
    if not names:
        reason = "the nodes that trained the reference are not the ones that trained the store (manifest nodes)"
    elif not plan:
        reason = "the nodes registered other records than the store was trained on (manifest partitions)"
    return {"equal": names and plan, "nodes": names, "partitions": plan, "reason": reason}


def compare_held_samples(held: HeldSamples, store: Store, scratch: Store) -> dict[str, Any]:
    """The server-held samples: the ids the store recorded (what its retrains read) against the scratch run's draw."""
    ours = [int(i) for i in store.manifest().get(held.key) or []]
    theirs = [int(i) for i in scratch.manifest().get(held.key) or []]
    return {"equal": ours == theirs, "size": len(ours), "scratch_size": len(theirs)}


def _not_checked(compared: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Each served DP adapter left out of the bit-for-bit comparison, and why (named, never silent)."""
    out = []
    for c in compared:
        if c["served"] and c["dp_covered"]:
            out.append({"artifact": c["artifact"], "why": "carries forgotten samples under DP: (α, β)-forgetting "
                        "within its request budget, not bit-exactness"})
        elif c["served"] and c["dp_unreproducible"]:
            out.append({"artifact": c["artifact"], "why": "its DP noise comes from a node secret this verifier "
                        "does not hold (the node's own state dir)"})
    return out


def _reason(served_rows: list[dict[str, Any]], files: list[dict[str, str]], plan_check: dict[str, Any],
            outputs: dict[str, Any], shard: dict[str, Any] | None, kept: HeldSamples | None) -> str | None:
    """The first thing that makes the served model differ from scratch, in words (None when exact)."""
    if files:
        return "served file(s) " + ", ".join(f"{f['artifact']} ({f['problem']})" for f in files)
    if shard is not None and kept is not None and not shard["equal"]:
        return (f"the {kept.name} the store recorded ({shard['size']} ids) differs from the one the scratch run "
                f"draws ({shard['scratch_size']} ids)")
    if not served_rows:
        return "nothing is served; run `fedforget retrain` first"
    different = [c["artifact"] for c in served_rows if not c["equal"]]
    if different:
        return "served artifact(s) differ from scratch: " + ", ".join(different)
    if not plan_check["equal_recomputed"]:
        return "the stored serving plan differs from the plan recomputed from the valid artifacts"
    if plan_check["equal_scratch"] is False:
        return "the serving plan differs from the scratch run's"
    if outputs["equal"] is False:
        return f"the served outputs differ from scratch (max |Δp| {outputs['max_abs_diff']:.3g})"
    return None
