"""``fedforget status``: what a store holds and serves, as a dict (for --json) and as rich text."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from fedforget.core.config import stored_run_config
from fedforget.methods.registry import FAMILIES
from fedforget.store import Store
from fedforget.store.initial_arrays import recorded_sha
from fedforget.tasks.task_functions import metric_names


def store_status(store: Store, accuracy: bool = True) -> dict[str, Any]:
    """Task, method, config, the serving plan, requests, every artifact with validity and integrity, and the
    sha256 of the initial arrays the store's training started from (None: the seeded start).

    ``accuracy`` is the served model's test accuracy: cached by training, retrain and ``evaluate``
    for the plan they saw, and computed here (torch) when the plan changed since.
    """
    manifest = store.manifest()
    ledger = store.ledger()
    try:
        plan = ledger.plan()
        serving = ledger.serving()
        served = set(serving.get("artifacts", []))
        lineage_sizes = dict(ledger.db.execute("SELECT artifact, COUNT(*) FROM lineage GROUP BY artifact"))
        from fedforget.store.purge import purged_artifacts

        purged = purged_artifacts(ledger.db)
        artifacts = [
            {"artifact_id": a["artifact"], "sha256": a["sha256"], "kind": a["kind"], "valid": a["valid"],
             "purged": a["artifact"] in purged,
             "intact": a["artifact"] not in purged and store.verify_artifact(a["sha256"]),
             "serving": a["artifact"] in served,
             "lineage_units": int(lineage_sizes.get(a["artifact"], 0)), "watermark": a["watermark"]}
            for a in ledger.artifacts()
        ]
        requests = ledger.requests()
        cached = ledger.get_meta("accuracy")
        on_nodes = ledger.get_meta("federated-accuracy")
        forgotten = ledger.forgotten_count()
        unbuilt = ledger.get_meta("unbuilt") or {"artifacts": [], "partitions": []}
        from fedforget.store.acks import request_acks

        acks = request_acks(ledger)
        index = {"clients": int(ledger.db.execute("SELECT COUNT(DISTINCT partition) FROM units").fetchone()[0]),
                 "slices": int(ledger.db.execute("SELECT COUNT(*) FROM units").fetchone()[0]),
                 "samples": ledger.num_samples()}
        log = log_status(ledger.db)
    finally:
        ledger.close()
    acc = None
    own: dict[str, Any] = {}  # the task's own metric's values (Task(metric=...)), beside the accuracy
    servable = bool(serving.get("available")) and bool(served)  # else nothing is served: no accuracy to show
    if servable and cached and cached.get("serving") == sorted(served):
        acc = cached["accuracy"]
        own = cached
    elif accuracy and servable and all(a["intact"] for a in artifacts if a["serving"]):
        from fedforget.federation.serve import ServingError
        from fedforget.tasks.server_data import ServerTestError
        from fedforget.unlearning.evaluate import evaluate_store

        try:
            own = evaluate_store(store)
            acc = own["accuracy"]
        except ServingError:  # nothing servable after all: status shows that instead of failing
            acc = None
        except ServerTestError:  # a server without a test set (the nodes evaluated what is served)
            acc = None
    corrupt = [a["artifact_id"] for a in artifacts if not a["intact"] and not a["purged"]]
    backbone = manifest.get("backbone") or {}
    available = bool(serving.get("available")) and not any(a["serving"] for a in artifacts if not a["intact"])
    return {
        "store": str(store.root),
        "task": manifest.get("task"),
        "method": manifest.get("method"),
        "config": stored_run_config(manifest.get("config", {})),
        "num_partitions": manifest.get("num-partitions"),
        "rounds_done": int(manifest.get("rounds-done", 0)),
        "accuracy": None if acc is None or (isinstance(acc, float) and math.isnan(acc)) else acc,
        "accuracy_on": "the server's test set",
        "federated_accuracy": nodes_evaluation(on_nodes, served, metric_names(manifest)) if servable else None,
        "task_metrics": {k: own[k] for k in metric_names(manifest) if isinstance(own.get(k), int | float)},
        "serving": sorted(served),
        "serving_plan": serving,
        "available": available,
        "retrain_required": bool(plan) and not serving.get("available"),
        "deletions_left": serving.get("deletions-left"),
        "index": index,
        "requests": {"total": len(requests), "pending": sum(r["state"] == "pending" for r in requests),
                     "forgotten_samples": forgotten},
        "artifacts": artifacts,
        "corrupt": corrupt,
        "unbuilt": unbuilt,
        "acknowledgements": {str(r): a for r, a in acks.items()},
        "backbone": {"source": backbone.get("source"), "weights_sha256": backbone.get("weights-sha256"),
                     "artifact": backbone.get("artifact")},
        "initial_arrays": recorded_sha(manifest),
        "complete": bool(served) and not corrupt,
        "log": log,
        "deadlines": deadline_status(store),
        **method_status(StatusView(store, manifest, plan, serving, artifacts)),
    }


def deadline_status(store: Store) -> dict[str, Any]:
    """The forget service's requests against their legal clock (``fedforget.unlearning.deadlines``): the settings in
    force, open requests, those nearing their deadline and those overdue (all zero for a store without a service)."""
    from fedforget.unlearning.deadlines import deadline_status as service_deadlines

    return service_deadlines(store)


def deadline_line(deadlines: dict[str, Any]) -> str | None:
    """One line of the service requests' deadlines, or None for a store that never had one."""
    if not deadlines.get("requests"):
        return None
    line = (f"service requests {deadlines['requests']} on the {deadlines['policy']} clock (complete once "
            f"{deadlines['completion_point']}): {deadlines['open']} open · {deadlines['nearing']} due within "
            f"{deadlines['nearing_days']:g} days · {deadlines['overdue']} overdue")
    if deadlines.get("completed_late"):
        line += f" · {deadlines['completed_late']} completed late"
    if deadlines.get("earliest_deadline") is not None:
        from datetime import UTC, datetime

        due = datetime.fromtimestamp(deadlines["earliest_deadline"], UTC).strftime("%Y-%m-%d %H:%M UTC")
        line += f" · earliest due {due}"
    return line


def nodes_evaluation(cached: Any, served: set[str],  # noqa: ANN401 - a ledger value
                     names: Sequence[str] = ()) -> dict[str, Any] | None:
    """The nodes' evaluation of what is served now (``evaluate-on-nodes``), as the run that served it measured
    it: the example-weighted accuracy and loss on their own test records, and of the task's own metric values
    ``names`` (under ``metrics``, when it has any); None when the served plan changed since (a forget), or no run
    measured it."""
    if not isinstance(cached, dict) or cached.get("serving") != sorted(served):
        return None
    own = {k: cached[f"federated-{k}"] for k in names if f"federated-{k}" in cached}
    return {"accuracy": cached.get("federated-accuracy"), "loss": cached.get("federated-loss"),
            "examples": cached.get("federated-examples"), "nodes": cached.get("federated-nodes"),
            "on": "the nodes' own test records", **({"metrics": own} if own else {})}


def accuracy_line(status: dict[str, Any]) -> str:
    """The served accuracy, saying which evaluation each number is."""
    acc, nodes = status["accuracy"], status.get("federated_accuracy")
    line = f"served accuracy {'—' if acc is None else f'{acc:.4f}'} (server's test set)"
    line += "".join(f", {k} {v:.4f}" for k, v in (status.get("task_metrics") or {}).items())
    if nodes and isinstance(nodes.get("accuracy"), int | float):
        line += (f" · {nodes['accuracy']:.4f} on the nodes' test records ({nodes.get('examples')} records, "
                 f"{nodes.get('nodes')} nodes)")
    return line


def log_status(db: Any) -> dict[str, Any]:
    """The ledger's log: its id, how many entries, how many no signed head covers yet, whether it was adopted."""
    from fedforget.store.log import has_log, latest_head, log_id, log_size, unsigned_entries

    if not has_log(db):
        return {"id": None, "entries": 0, "unsigned": 0, "signed_head": None, "adopted": None}
    head = latest_head(db)
    adopted = db.execute("SELECT 1 FROM log_state WHERE key='adopted'").fetchone() is not None
    return {"id": log_id(db), "entries": log_size(db), "unsigned": unsigned_entries(db), "adopted": adopted,
            "signed_head": None if head is None else {"size": head.get("size"), "root": head.get("root"),
                                                      "at": head.get("at")}}


@dataclass(frozen=True)
class StatusView:
    """What a method's ``status`` hook reads: the store and what ``status`` already loaded of it."""

    store: Store
    manifest: dict[str, Any]
    plan: dict[str, Any] | None
    serving: dict[str, Any]
    artifacts: list[dict[str, Any]]


def method_status(view: StatusView) -> dict[str, Any]:
    """Every method's keys (each method answers for other methods' stores with empty values, so the
    ``--json`` shape does not depend on the method)."""
    out: dict[str, Any] = {}
    for method in FAMILIES:
        if method.status:
            out.update(method.status(view))
    return out


def non_default_config(config: dict[str, Any]) -> dict[str, Any]:
    """The run config's values that apply to its method and differ from the defaults of its own method and
    task (what a reader needs to know; the auto keys resolve per method and task, so another task's defaults
    would differ). A flat-key manifest is shown under the grouped names."""
    from fedforget.core.config import RunConfig

    config = stored_run_config(config)
    base = RunConfig()
    try:
        defaults = RunConfig(method=str(config.get("method", base.method)),
                             task=str(config.get("task", base.task))).to_dict()
    except (TypeError, ValueError):  # a store written by another version: compare with the plain defaults
        defaults = base.to_dict()
    return {k: v for k, v in config.items() if k not in defaults or defaults[k] != v}


def print_status(status: dict[str, Any], console: Console, show_artifacts: bool = False) -> None:
    """Short by default (config that differs from the defaults, artifact counts); ``show_artifacts`` lists
    every artifact with its validity and sha256."""
    console.print(f"[bold]store[/] {status['store']}")
    console.print(f"task [cyan]{status['task']}[/] · method [cyan]{status['method']}[/] · "
                  f"{status['num_partitions']} partitions · rounds done {status['rounds_done']} · "
                  f"{accuracy_line(status)}", soft_wrap=True)
    cfg = non_default_config(status["config"])
    console.print("config (differs from the defaults) " + (" ".join(f"{k}={v!r}" for k, v in sorted(cfg.items()))
                                                            or "—"), style="dim")
    if status.get("initial_arrays"):
        console.print(f"training started from initial arrays sha256 {status['initial_arrays'][:16]}… (recorded; a "
                      "retrain and verify start from them)", soft_wrap=True)
    req = status["requests"]
    left = status["deletions_left"]
    console.print(f"requests {req['total']} ({req['pending']} pending a retrain) · forgotten samples "
                  f"{req['forgotten_samples']} · expected deletions left (δ) "
                  f"{'—' if left is None else f'{left:.2f}'}")
    index = status.get("index")
    if index:
        console.print(f"data {index['samples']} samples in {index['slices']} slices of {index['clients']} clients · "
                      "`fedforget samples --client N` lists a client's, `fedforget locate --sample ID` finds one "
                      "(`--record NODE:RECORD_ID` for a record as its node knows it)",
                      soft_wrap=True)
    log = status.get("log") or {}
    if log.get("id"):
        console.print(f"log {log['entries']} entries · {log['unsigned']} not yet under a signed head"
                      + (" (the coordinator's next write signs them; `fedforget log sign` now)" if log["unsigned"]
                         else "") + (" · adopted by a store written before the log" if log.get("adopted") else "")
                      + f" · id {str(log['id'])[:16]}…", soft_wrap=True)
    deadlines = deadline_line(status.get("deadlines") or {})
    if deadlines:
        overdue = (status.get("deadlines") or {}).get("overdue")
        console.print(deadlines, style="bold red" if overdue else None, soft_wrap=True, highlight=False)
    for request, a in status.get("acknowledgements", {}).items():
        console.print(f"request #{request}: clients acknowledged deletion {a['acknowledged'] or '—'}"
                      + (f" · pending {a['pending']}" if a["pending"] else ""))
    arts = status["artifacts"]
    console.print(f"[bold]artifacts[/] {len(arts)}: {sum(a['valid'] for a in arts)} valid · "
                  f"{sum(a['serving'] for a in arts)} served · {sum(a.get('purged', False) for a in arts)} purged · "
                  f"{len(status['corrupt'])} corrupt" + ("" if show_artifacts else " (--artifacts lists them)"))
    for a in arts if show_artifacts else []:
        flags = [
            "valid" if a["valid"] else "[red]invalid[/]",
            "purged" if a["purged"] else "intact" if a["intact"] else "[red]CORRUPT: bytes do not match sha256[/]",
            f"{a['lineage_units']} units",
        ]
        console.print(f" {'●' if a['serving'] else ' '} [cyan]{a['artifact_id']}[/] {a['kind']} · " + " · ".join(flags))
        console.print(f"   sha256 {a['sha256']}", soft_wrap=True, style="dim")
    for method in FAMILIES:
        if method.print_status:
            method.print_status(status, console)
    if status["retrain_required"]:
        console.print("[bold red]retrain required[/]: no valid model is left to serve; run `fedforget retrain`")
    elif not status["serving"] and not status.get("unbuilt", {}).get("artifacts"):
        console.print("[yellow]nothing is served yet: the run did not finish[/]")
    if status.get("unbuilt", {}).get("artifacts"):
        u = status["unbuilt"]
        named = ", ".join(u["artifacts"][:6]) + (", …" if len(u["artifacts"]) > 6 else "")
        console.print(f"[yellow]{len(u['artifacts'])} artifact(s) unbuilt[/] ({named}): partition(s) {u['partitions']} "
                      "were lost mid-run; `fedforget retrain` builds them when the nodes are back")
    if status["corrupt"]:
        console.print(f"[bold red]corrupt artifacts are never served[/]: {', '.join(status['corrupt'])}")
